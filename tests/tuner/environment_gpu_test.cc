// DetectEnvironment on the device this runs on (skipped, with Device::Open's reason, where
// there is none): every software version is known, so the fingerprint never equals the
// target's own environment.
#include <memory>
#include <optional>
#include <string>

#include "device/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/launch/nvrtc_compiler.h"
#include "targets/target.h"
#include "tuner/environment.h"

namespace tileplan::tuner {
namespace {

// The first bundled target whose sm is (or, with `same` false, is not) `sm`.
std::optional<targets::TargetDescription> BundledTargetOfSm(int sm, bool same) {
  for (const std::string& name : targets::BundledTargetNames()) {
    absl::StatusOr<targets::TargetDescription> target = targets::FindTarget(name);
    if (target.ok() && (target->sm() == sm) == same) return *target;
  }
  return std::nullopt;
}

TEST(EnvironmentGpuTest, DetectsEveryVersion) {
  absl::StatusOr<std::unique_ptr<device::Device>> device = device::Device::Open(0);
  if (!device.ok()) GTEST_SKIP() << device.status().message();
  kernels::NvrtcCompiler::Options options;
  options.use_disk_cache = false;
  absl::StatusOr<std::unique_ptr<kernels::NvrtcCompiler>> compiler =
      kernels::NvrtcCompiler::Create(options);
  ASSERT_TRUE(compiler.ok()) << compiler.status();
  const device::DeviceProperties& p = (*device)->properties();
  std::optional<targets::TargetDescription> target = BundledTargetOfSm(p.sm, true);
  if (!target.has_value()) GTEST_SKIP() << "no bundled target of sm_" << p.sm;

  absl::StatusOr<Environment> env = DetectEnvironment(**device, **compiler, *target);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->gpu, p.name);
  EXPECT_EQ(env->sm, p.sm);
  EXPECT_EQ(env->sm_count, p.sm_count);
  EXPECT_EQ(env->l2_bytes, p.l2_bytes);
  EXPECT_EQ(env->bandwidth_gbps, target->achievable_memory_bandwidth_gbps());
  EXPECT_GT(env->driver_version, 0);
  EXPECT_GT(env->cuda_runtime_version, 0);
  EXPECT_EQ(env->nvrtc_version, (*compiler)->nvrtc_version());
  EXPECT_FALSE(env->nvrtc_version.empty());
  EXPECT_GT(env->cublaslt_version, 0);
  EXPECT_NE(env->Fingerprint(), FromTarget(*target).Fingerprint());

  std::optional<targets::TargetDescription> other = BundledTargetOfSm(p.sm, false);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(DetectEnvironment(**device, **compiler, *other).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tileplan::tuner
