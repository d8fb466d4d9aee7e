// The GPU conformance harness of the kernel families, in the manner of one harness for all
// kernels (ggml's test-backend-ops): every family's cases run through one path against the
// float32 CPU reference backend (runtime/cpu).
//
// A case is a small graph whose last region runs on the family under test (earlier regions
// are views, so strided operands are covered), run on fresh random inputs (rounded to their
// dtype, so that both sides see the same values) under the target's default tactic and the
// case's explicit ones (odd sizes, split-K/KV, several rows per CTA). It runs as the runtime
// runs a step, through the StepLauncher (kernels/step/step_launcher.h): Prepare, Load, Bind,
// Enqueue on a non-blocking stream, whatever the family launches through (CUDA templates or
// a library such as cuBLASLt). Before every launch the results and the workspace are poisoned
// (all bits set: NaN for floats, -1 for ints); the counters are zeroed once and every case
// runs twice under each tactic (the second launch checks that the single-launch split
// reductions re-arm their counters); the error word must stay 0; outputs are compared with
// a tolerance per dtype relative to max |ref| (Tolerance).
//
// Without a usable GPU, TP_REQUIRE_GPU skips with the reason (Device::Open's, or the
// launcher's), and CheckCaseOnCpu still checks every case on the CPU (graph, reference,
// tactics and, for template families, launch preparation), so the cases are known good
// before a GPU sees them.
//
// How to add cases: a family's cases are one file, tests/kernels/conformance/<family>_cases.cc,
// whose table `std::vector<CaseGroup> <Family>CaseGroups()` lists its groups as {name, cases}
// rows: a Case written in place (a graph, the family, the int inputs, the explicit tactics),
// or a function of the file that builds several. Each group is one test of kernels_gpu_test,
// KernelsGpuTest.MatchesTheCpuReference/<name> (names are unique across families), and
// KernelsGpuCasesTest checks its cases on the CPU. A new family's table is declared in
// conformance/cases.h and listed in AllCaseGroups() (conformance/cases.cc); the harness
// itself names no family.
#ifndef TILEPLAN_TESTS_KERNELS_GPU_HARNESS_H_
#define TILEPLAN_TESTS_KERNELS_GPU_HARNESS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device.h"
#include "device/device_buffer.h"
#include "gtest/gtest.h"
#include "kernels/core/bound_graph.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"
#include "kernels/step/step_launcher.h"
#include "regions/ir.h"
#include "runtime/cpu/cpu_backend.h"

namespace tileplan::kernels::testing {

using Params = std::map<std::string, int64_t>;

// One conformance case: a graph whose last region runs on `family`, the int inputs it needs
// (floats are random), the symbol bindings, and explicit tactics besides the default. Every
// member but the first two has a default, so a case written with designated initializers
// names only what it sets.
struct Case {
  std::string graph;
  std::string family;
  ShapeBindings bindings = {};
  int64_t context = 1;
  std::map<std::string, std::vector<int32_t>> ints = {};
  // Float declarations given these values (rounded to their dtype, as the random ones are)
  // instead of random ones: inputs a kernel must see exactly, such as a router whose top-k
  // stays decisive when its logits are rounded.
  std::map<std::string, std::vector<float>> floats = {};
  // Float declarations whose rows (along the last dim) are scaled, row r by factor
  // r % size: rows of different magnitudes, so a kernel that mixes up per-row statistics
  // (an RMSNorm factor) shows.
  std::map<std::string, std::vector<float>> row_scales = {};
  std::vector<Params> tactics = {};
  // When >= 0, result 0 is written over this operand's storage, as the memory planner
  // places it when the family allows it (KernelFamily::MayOverwriteOperand; linear_residual's
  // C == D), and the output is read there. Otherwise every result has its own storage.
  int result_over_operand = -1;
  // When > 0, the case runs on a GPU of exactly this compute capability (an
  // architecture-specific family's) and is skipped, saying so, on others; its CPU checks
  // run on the sm_90 target regardless.
  int sm = 0;
  // When > 0, the case runs on GPUs of at least this compute capability (tactics that need
  // thread-block clusters, say) and is skipped, saying so, on older ones.
  int min_sm = 0;
};

// A named group of cases: one test.
struct CaseGroup {
  std::string name;
  std::vector<Case> cases;
};

// Names the group in test names and failure messages.
void PrintTo(const CaseGroup& group, std::ostream* os);

// Everything about a case that needs no GPU: the bound graph, its random declarations, the
// CPU reference outputs and the validated tactics (the target's default first).
struct PreparedCase {
  std::unique_ptr<ir::Graph> graph;
  std::optional<BoundGraph> bound;
  int region = 0;  // the last region, the one under test
  const KernelFamily* family = nullptr;
  int result_over_operand = -1;  // Case::result_over_operand
  std::map<ir::ValueId, runtime::cpu::HostTensor> declared;
  std::vector<runtime::cpu::HostTensor> reference;
  std::vector<Tactic> tactics;
  bool ok = false;  // set when every step above succeeded

  const Tactic& default_tactic() const { return tactics.front(); }
};

// Fills `out` for running `c` on `target`, its random inputs drawn from `seed`; gtest
// failures (fatal ones return early, leaving `out.ok` false) on any problem.
void PrepareCase(const Case& c, const TargetDescription& target, unsigned seed, PreparedCase& out);

// Every check of a case that needs no GPU: PrepareCase on `target`, and for template
// families the launches of every tactic prepared on fake (aligned, never dereferenced)
// buffers.
void CheckCaseOnCpu(const Case& c, const TargetDescription& target);

// The device, the step launcher (compiler, kernel loader, cuBLASLt runner) and the
// non-blocking stream shared by every GPU test of the binary, opened once.
class GpuEnvironment {
 public:
  // Opens them on the first call; the status says why there is no usable GPU.
  static const absl::Status& Init();
  // REQUIRES: Init() is OK.
  static const device::Device& device();
  static StepLauncher& launcher();
  static cudaStream_t stream();
  // The bundled target matching the device (its sm alias), else the H200 description.
  static TargetDescription Target();
};

// Skips the test (with the reason) when there is no usable GPU.
#define TP_REQUIRE_GPU()                                                                    \
  do {                                                                                      \
    const absl::Status& gpu_status_ = ::tileplan::kernels::testing::GpuEnvironment::Init(); \
    if (!gpu_status_.ok()) GTEST_SKIP() << gpu_status_.message();                           \
  } while (false)

// The tolerance of an output of `dtype`, relative to max |ref|:
//   bf16 1e-2: a stored bf16 value carries up to 2^-9 relative rounding, and fused kernels
//              round a few intermediates (attention's probabilities before P V), so a few
//              ulps of max |ref| separate a right kernel from the reference while an
//              indexing or masking error moves values by O(max |ref|);
//   f16  4e-3 (10 mantissa bits), f32 1e-4 (float accumulation against the reference's
//   double); i32 outputs are compared exactly (ExpectClose).
double Tolerance(ir::DType dtype);

// An output read back from the device.
struct Output {
  ir::DType dtype = ir::DType::kF32;
  std::vector<float> f;
  std::vector<int32_t> i;
};

// Elements of `layout` read out of its root's bytes.
Output Gather(ir::DType dtype, const Layout& layout, const std::string& root_bytes);

// gtest failures (the first five elements off, then the count, the worst error and max
// |ref|) unless `got` matches `ref` within Tolerance(got.dtype) · max |ref| (exactly for
// i32). NaN (an unwritten, poisoned element) never matches.
void ExpectClose(const std::string& what, const runtime::cpu::HostTensor& ref, const Output& got);

// A prepared case on the device under one tactic: the region's step, prepared and loaded
// through the environment's launcher, and the case's storage bound to it: a buffer per root
// value (at least 16 bytes), the family's workspace and counters, the error word and, for
// regions with RoPE attributes, the inverse-frequency table.
class DeviceCase {
 public:
  // `p` must outlive this object.
  explicit DeviceCase(const PreparedCase& p) : p_(p) {}

  // Prepares the step under `tactic` (PrepareStep), allocates the storage, binds it to the
  // step (binding 0) and Resets; the counters and the error word are zeroed here, once. gtest
  // failures on any problem.
  void Setup(const Tactic& tactic);
  // Before each launch: poisons every result root and the workspace, uploads the
  // declarations again, and waits for the copies.
  void Reset();
  // Enqueues binding 0 on the environment's stream.
  absl::Status Enqueue();
  // Expects the error word to be 0 and every graph output (read where it was written) to
  // match the reference.
  void Check();
  // Whether every byte of the root that output 0 is read from is still the poison.
  bool OutputPoisoned();

  PreparedStep& step() { return *step_; }
  // The buffers of binding 0: results over their operand where the case says so
  // (Case::result_over_operand).
  const RegionBuffers& buffers() const { return buffers_; }

 private:
  // The layout output `j` of the graph is read at: result 0 over its operand
  // (Case::result_over_operand), else its own.
  const Layout& OutputLayout(size_t j) const;
  absl::StatusOr<std::string> RootBytes(ir::ValueId root);

  const PreparedCase& p_;
  std::unique_ptr<PreparedStep> step_;
  int binding_ = 0;
  RegionBuffers buffers_;
  std::map<ir::ValueId, device::DeviceBuffer> roots_;
  device::DeviceBuffer workspace_, counters_, error_, rope_inv_freq_;
};

// Waits for the environment's stream and for the device; the first error.
absl::Status Synchronize();

// Prepares `region` under `tactic` of `family` through the environment's launcher (labelled
// with the region) and loads it.
absl::StatusOr<std::unique_ptr<PreparedStep>> PrepareStep(const KernelFamily& family,
                                                          const BoundRegion& region,
                                                          const Tactic& tactic);

// Runs a prepared case on the GPU under each of `tactics` (normally p.tactics): a fresh
// DeviceCase Setup, then twice (Reset before the second run) Enqueue, Synchronize and Check.
// Prints what a library step resolved (its Describe). gtest failures on any problem.
void RunOnDevice(const PreparedCase& p, const std::vector<Tactic>& tactics);

}  // namespace tileplan::kernels::testing

#endif  // TILEPLAN_TESTS_KERNELS_GPU_HARNESS_H_
