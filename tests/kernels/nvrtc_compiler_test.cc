// The NVRTC compiler without a GPU: instantiation by name expression, cubin output, the
// full log on failure, and the disk cache (hits, invalidation by key, corrupt entries).
#include "kernels/launch/nvrtc_compiler.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tileplan::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

constexpr char kScaleSource[] = R"(
#pragma once
#include "helper.cuh"
namespace demo {
template <typename T, int kFactor>
__global__ void scale(const T* x, T* y, int n) {
  static_assert(kFactor > 0, "kFactor must be positive");
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = twice(x[i]) * kFactor;
}
}  // namespace demo
)";
constexpr char kHelperSource[] = R"(
#pragma once
template <typename T>
__device__ T twice(T v) { return v + v; }
)";
constexpr char kBrokenSource[] = R"(
__global__ void broken(int* p) { p[0] = undeclared_name; }
)";

std::string FreshDirectory(absl::string_view name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/nvrtc_compiler_test.", ::getpid(), ".", name);
  std::filesystem::remove_all(dir);
  return dir;
}

std::unique_ptr<NvrtcCompiler> MakeCompiler(std::optional<std::string> cache_dir) {
  NvrtcCompiler::Options options;
  options.sources = {
      {"scale.cuh", kScaleSource}, {"helper.cuh", kHelperSource}, {"broken.cuh", kBrokenSource}};
  options.use_disk_cache = cache_dir.has_value();
  options.cache_directory = cache_dir;
  absl::StatusOr<std::unique_ptr<NvrtcCompiler>> compiler = NvrtcCompiler::Create(options);
  EXPECT_TRUE(compiler.ok()) << compiler.status();
  return compiler.ok() ? *std::move(compiler) : nullptr;
}

CompileRequest ScaleRequest(int sm) {
  return {"scale.cuh", {"demo::scale<float, 2>", "demo::scale<int, 3>"}, sm, false, {}};
}

TEST(NvrtcCompilerTest, CompilesInstantiationsToACubin) {
  std::unique_ptr<NvrtcCompiler> compiler = MakeCompiler(std::nullopt);
  ASSERT_NE(compiler, nullptr);
  absl::StatusOr<CompiledModule> module = compiler->Compile(ScaleRequest(80));
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ(module->arch, "sm_80");
  EXPECT_THAT(module->cubin, StartsWith("\x7f"
                                        "ELF"));
  ASSERT_THAT(module->lowered_names, SizeIs(2));
  EXPECT_EQ(module->lowered_names[0], "_ZN4demo5scaleIfLi2EEEvPKT_PS1_i");
  EXPECT_EQ(module->lowered_names[1], "_ZN4demo5scaleIiLi3EEEvPKT_PS1_i");
  EXPECT_FALSE(module->from_cache);
}

TEST(NvrtcCompilerTest, FailureCarriesTheLogAndTheInstantiations) {
  std::unique_ptr<NvrtcCompiler> compiler = MakeCompiler(std::nullopt);
  ASSERT_NE(compiler, nullptr);
  absl::StatusOr<CompiledModule> module =
      compiler->Compile({"scale.cuh", {"demo::scale<float, 0>"}, 90, false, {}});
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(module.status().message()), HasSubstr("scale.cuh for sm_90"));
  EXPECT_THAT(std::string(module.status().message()), HasSubstr("demo::scale<float, 0>"));
  EXPECT_THAT(std::string(module.status().message()), HasSubstr("kFactor must be positive"));

  module = compiler->Compile({"broken.cuh", {"&broken"}, 90, false, {}});
  ASSERT_FALSE(module.ok());
  EXPECT_THAT(std::string(module.status().message()), HasSubstr("undeclared_name"));
  EXPECT_THAT(std::string(module.status().message()), HasSubstr("log:"));
}

TEST(NvrtcCompilerTest, RefusesUnknownTemplatesArchitecturesAndEmptyRequests) {
  std::unique_ptr<NvrtcCompiler> compiler = MakeCompiler(std::nullopt);
  ASSERT_NE(compiler, nullptr);
  absl::StatusOr<CompiledModule> module = compiler->Compile({"nope.cuh", {"f"}, 90, false, {}});
  EXPECT_THAT(std::string(module.status().message()),
              HasSubstr("no kernel template named 'nope.cuh'"));
  EXPECT_THAT(std::string(module.status().message()),
              HasSubstr("broken.cuh, helper.cuh, scale.cuh"));
  module = compiler->Compile({"scale.cuh", {"demo::scale<float, 2>"}, 10, false, {}});
  EXPECT_EQ(module.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(module.status().message()), HasSubstr("cannot compile for sm_10"));
  module = compiler->Compile({"scale.cuh", {}, 90, false, {}});
  EXPECT_THAT(std::string(module.status().message()), HasSubstr("no instantiation named"));
  module = compiler->Compile({"scale.cuh", {"demo::scale<float, 2>"}, 90, false, {"nope.cuh"}});
  EXPECT_THAT(std::string(module.status().message()),
              HasSubstr("no kernel template named 'nope.cuh'"));
  // An included file's templates are instantiated like the source's.
  module = compiler->Compile({"helper.cuh", {"demo::scale<float, 2>"}, 90, false, {"scale.cuh"}});
  EXPECT_TRUE(module.ok()) << module.status();
}

TEST(NvrtcCompilerTest, ReportsVersionAndArchitectures) {
  std::unique_ptr<NvrtcCompiler> compiler = MakeCompiler(std::nullopt);
  ASSERT_NE(compiler, nullptr);
  EXPECT_THAT(compiler->nvrtc_version(), ::testing::MatchesRegex("[0-9]+\\.[0-9]+"));
  EXPECT_THAT(compiler->supported_archs(), ::testing::Contains(80));
  EXPECT_THAT(compiler->supported_archs(), ::testing::Contains(90));
  EXPECT_TRUE(
      std::is_sorted(compiler->supported_archs().begin(), compiler->supported_archs().end()));
}

TEST(NvrtcCompilerTest, SecondCompileComesFromTheDiskCache) {
  const std::string dir = FreshDirectory("hit");
  std::unique_ptr<NvrtcCompiler> compiler = MakeCompiler(dir);
  ASSERT_NE(compiler, nullptr);
  absl::StatusOr<CompiledModule> first = compiler->Compile(ScaleRequest(90));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->from_cache);
  // A new compiler (a new process, as far as the cache can tell) finds the entry.
  std::unique_ptr<NvrtcCompiler> again = MakeCompiler(dir);
  absl::StatusOr<CompiledModule> second = again->Compile(ScaleRequest(90));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->arch, "sm_90");
  EXPECT_EQ(second->cubin, first->cubin);
  EXPECT_EQ(second->lowered_names, first->lowered_names);
}

TEST(NvrtcCompilerTest, CorruptCacheEntryIsRebuilt) {
  const std::string dir = FreshDirectory("corrupt");
  std::unique_ptr<NvrtcCompiler> compiler = MakeCompiler(dir);
  ASSERT_NE(compiler, nullptr);
  ASSERT_TRUE(compiler->Compile(ScaleRequest(80)).ok());
  const std::string path = compiler->cache()->EntryPath(compiler->CacheKey(ScaleRequest(80)));
  ASSERT_TRUE(std::filesystem::exists(path));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "garbage";
  absl::StatusOr<CompiledModule> rebuilt = compiler->Compile(ScaleRequest(80));
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_FALSE(rebuilt->from_cache);
  absl::StatusOr<CompiledModule> cached = compiler->Compile(ScaleRequest(80));
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_TRUE(cached->from_cache);
  EXPECT_EQ(cached->cubin, rebuilt->cubin);
}

TEST(NvrtcCompilerTest, CacheKeyCoversArchNamesSourcesAndVersion) {
  std::unique_ptr<NvrtcCompiler> compiler = MakeCompiler(std::nullopt);
  ASSERT_NE(compiler, nullptr);
  const std::string key = compiler->CacheKey(ScaleRequest(90));
  EXPECT_THAT(key, HasSubstr(absl::StrCat("nvrtc=", compiler->nvrtc_version())));
  EXPECT_THAT(key, HasSubstr("arch=sm_90\n"));
  EXPECT_NE(compiler->CacheKey(ScaleRequest(80)), key);
  CompileRequest arch_specific = ScaleRequest(90);
  arch_specific.arch_specific = true;
  EXPECT_NE(compiler->CacheKey(arch_specific), key);
  CompileRequest other_names = ScaleRequest(90);
  other_names.name_expressions.pop_back();
  EXPECT_NE(compiler->CacheKey(other_names), key);
  CompileRequest with_include = ScaleRequest(90);
  with_include.includes = {"helper.cuh"};
  EXPECT_NE(compiler->CacheKey(with_include), key);

  NvrtcCompiler::Options options;
  options.sources = {{"scale.cuh", std::string(kScaleSource) + "\n// edited\n"},
                     {"helper.cuh", kHelperSource},
                     {"broken.cuh", kBrokenSource}};
  options.use_disk_cache = false;
  absl::StatusOr<std::unique_ptr<NvrtcCompiler>> edited = NvrtcCompiler::Create(options);
  ASSERT_TRUE(edited.ok());
  EXPECT_NE((*edited)->CacheKey(ScaleRequest(90)), key);
}

TEST(NvrtcCompilerTest, EmbedsEveryKernelTemplate) {
  std::vector<std::string> names;
  for (const SourceFile& file : AllKernelSources()) {
    names.push_back(file.name);
    EXPECT_FALSE(file.contents.empty()) << file.name;
  }
  EXPECT_THAT(names,
              ::testing::IsSupersetOf({"argmax.cuh", "attention_decode_split_kv.cuh",
                                       "attention_prefill_flash.cuh", "elementwise.cuh",
                                       "embedding_gather.cuh", "gemv_split_k.cuh", "primitives.cuh",
                                       "rms_norm.cuh", "rope_kv_write.cuh", "runtime_support.cuh",
                                       "gemv_params.h", "persistent.cuh", "persistent_params.h"}));
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

}  // namespace
}  // namespace tileplan::kernels
