#include "tuner/region_tuner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"
#include "device/device_buffer.h"
#include "device/event_timer.h"
#include "kernels/core/template_launch.h"
#include "regions/kinds.h"
#include "regions/rope.h"

namespace tileplan::tuner {
namespace {

using kernels::BoundRegion;
using kernels::Tactic;

// Errors after which the CUDA context is unusable.
bool IsSticky(cudaError_t e) {
  return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure ||
         e == cudaErrorMisalignedAddress || e == cudaErrorIllegalInstruction ||
         e == cudaErrorHardwareStackError || e == cudaErrorAssert ||
         e == cudaErrorInvalidAddressSpace || e == cudaErrorInvalidPc ||
         e == cudaErrorLaunchTimeout;
}

std::string Shorten(absl::string_view text, size_t max = 400) {
  if (text.size() <= max) return std::string(text);
  return absl::StrCat(text.substr(0, max), " ...");
}

// Storage of every root the region touches, one allocation per root.
struct Storage {
  std::map<ir::ValueId, device::DeviceBuffer> roots;
  std::byte* at(ir::ValueId root) const { return static_cast<std::byte*>(roots.at(root).data()); }
};

// One candidate, bound to every copy (binding c runs on copy c).
using Prepared = std::unique_ptr<kernels::PreparedStep>;

class Session {
 public:
  Session(kernels::StepLauncher& launcher, const targets::TargetDescription& target,
          const BoundRegion& region, const kernels::KernelFamily& family)
      : device_(launcher.device()),
        launcher_(launcher),
        target_(target),
        region_(region),
        family_(family) {}
  ~Session() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Setup(const std::vector<Tactic>& candidates, const TuneOptions& options) {
    TP_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    const kernels::BoundGraph& g = region_.bound_graph();
    for (int i = 0; i < region_.num_operands(); ++i) roots_.insert(region_.operand(i).root);
    for (int i = 0; i < region_.num_results(); ++i) {
      const ir::ValueId root = region_.result(i).root;
      if (!roots_.contains(root)) fresh_results_.insert(root);
      roots_.insert(root);
    }
    int64_t bytes_per_copy = 0;
    for (ir::ValueId root : roots_) bytes_per_copy += g.storage_bytes(root);
    const int64_t copies =
        std::clamp<int64_t>(options.rotate_bytes / std::max<int64_t>(1, bytes_per_copy) + 1, 1, 64);
    // The pristine inputs, then the copies.
    TP_ASSIGN_OR_RETURN(pristine_, Allocate());
    TP_RETURN_IF_ERROR(Fill(pristine_));
    for (int64_t c = 0; c < copies; ++c) {
      TP_ASSIGN_OR_RETURN(Storage s, Allocate());
      TP_RETURN_IF_ERROR(Restore(s));
      copies_.push_back(std::move(s));
    }
    int64_t workspace = 0, counters = 0;
    for (const Tactic& t : candidates) {
      if (!family_.ValidateTactic(t, region_, target_).ok()) continue;
      workspace = std::max(workspace, family_.WorkspaceBytes(t, region_));
      counters = std::max(counters, family_.CounterBytes(t, region_));
    }
    TP_ASSIGN_OR_RETURN(workspace_, device::DeviceBuffer::Allocate(device_, workspace));
    TP_ASSIGN_OR_RETURN(counters_, device::DeviceBuffer::Allocate(device_, counters));
    if (counters > 0) TP_RETURN_IF_ERROR(counters_.Fill(0));
    TP_ASSIGN_OR_RETURN(error_, device::DeviceBuffer::Allocate(device_, sizeof(int)));
    TP_RETURN_IF_ERROR(error_.Fill(0));
    if (ir::HasRope(region_.region())) {
      TP_ASSIGN_OR_RETURN(const ir::RopeParams params,
                          ir::RopeParamsFromAttributes(region_.region().attrs));
      const std::vector<float> freq = ir::RopeInvFreq(
          params, region_.result(ir::RopeHeadResult(region_.region())).shape.back());
      TP_ASSIGN_OR_RETURN(rope_, device::DeviceBuffer::Allocate(
                                     device_, static_cast<int64_t>(freq.size() * sizeof(float))));
      TP_RETURN_IF_ERROR(
          rope_.CopyFromHost(freq.data(), static_cast<int64_t>(freq.size() * sizeof(float))));
    }
    return absl::OkStatus();
  }

  kernels::RegionBuffers Buffers(const Storage& s) const {
    const kernels::BoundGraph& g = region_.bound_graph();
    kernels::RegionBuffers b;
    for (int i = 0; i < region_.num_operands(); ++i) {
      const kernels::Layout& l = region_.operand(i);
      b.operands.push_back(s.at(l.root) + l.offset * ir::DTypeSize(g.dtype(l.root)));
    }
    for (int i = 0; i < region_.num_results(); ++i) {
      const kernels::Layout& l = region_.result(i);
      b.results.push_back(s.at(l.root) + l.offset * ir::DTypeSize(g.dtype(l.root)));
    }
    b.workspace = workspace_.size() > 0 ? workspace_.data() : nullptr;
    b.counters = counters_.size() > 0 ? counters_.data() : nullptr;
    b.rope_inv_freq = rope_.size() > 0 ? rope_.as<float>() : nullptr;
    b.error = error_.as<int>();
    return b;
  }

  // Prepares a candidate; a failure is the candidate's status.
  std::optional<CandidateMeasurement> Prepare(const Tactic& tactic, Prepared& p) {
    auto fail = [&](CandidateStatus status, absl::string_view why) {
      return CandidateMeasurement{tactic, status, Shorten(why), 0};
    };
    if (absl::Status v = family_.ValidateTactic(tactic, region_, target_); !v.ok()) {
      return fail(CandidateStatus::kInvalid, v.message());
    }
    absl::StatusOr<Prepared> step =
        launcher_.Prepare(family_, region_, tactic, {}, region_.Label());
    if (!step.ok()) return fail(CandidateStatus::kInvalid, step.status().message());
    if ((*step)->kind() == kernels::LaunchKind::kNothing) {
      return fail(CandidateStatus::kInvalid,
                  absl::StrCat("family ", tactic.family, " has nothing to launch"));
    }
    if (absl::Status loaded = launcher_.Load({step->get()}); !loaded.ok()) {
      return fail(CandidateStatus::kCompileError, loaded.message());
    }
    for (const Storage& s : copies_) {
      if (absl::StatusOr<int> bound = (*step)->Bind(Buffers(s)); !bound.ok()) {
        return fail(CandidateStatus::kInvalid, bound.status().message());
      }
    }
    p = *std::move(step);
    return std::nullopt;
  }

  absl::Status Run(Prepared& p, size_t copy) { return p->Enqueue(static_cast<int>(copy), stream_); }

  // Synchronizes; a sticky error is returned as an error (the context is gone), any other
  // as the candidate's launch failure.
  absl::StatusOr<std::optional<std::string>> Sync() {
    cudaError_t e = cudaStreamSynchronize(stream_);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess) return std::optional<std::string>();
    if (IsSticky(e)) {
      return absl::InternalError(
          absl::StrCat("the GPU faulted (", cudaGetErrorName(e), ": ", cudaGetErrorString(e), ")"));
    }
    return std::optional<std::string>(
        absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
  }

  absl::Status Restore(Storage& s) {
    for (auto& [root, buffer] : s.roots) {
      TP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buffer.data(), pristine_.roots.at(root).data(),
                                              static_cast<size_t>(buffer.size()),
                                              cudaMemcpyDeviceToDevice, stream_));
    }
    TP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::Status Poison(Storage& s) {
    for (ir::ValueId root : fresh_results_) {
      TP_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
          s.roots.at(root).data(), 0xFF, static_cast<size_t>(s.roots.at(root).size()), stream_));
    }
    return absl::OkStatus();
  }

  // The result roots of copy 0, as host bytes.
  absl::StatusOr<std::vector<std::string>> ReadResults() {
    std::vector<std::string> out;
    for (int i = 0; i < region_.num_results(); ++i) {
      const device::DeviceBuffer& b = copies_[0].roots.at(region_.result(i).root);
      std::string bytes(static_cast<size_t>(b.size()), '\0');
      TP_RETURN_IF_ERROR(b.CopyToHost(bytes.data(), b.size()));
      out.push_back(std::move(bytes));
    }
    return out;
  }

  // Empty when `got` matches `want`, else why not.
  std::string Compare(const std::vector<std::string>& got, const std::vector<std::string>& want) {
    const kernels::BoundGraph& g = region_.bound_graph();
    for (int i = 0; i < region_.num_results(); ++i) {
      const ir::DType dtype = g.dtype(region_.result(i).root);
      if (dtype == ir::DType::kI32) {
        if (got[i] != want[i]) return absl::StrCat("result ", i, " differs from the reference");
        continue;
      }
      const std::vector<float> a = kernels::DecodeFloats(dtype, got[i]);
      const std::vector<float> b = kernels::DecodeFloats(dtype, want[i]);
      double max_diff = 0, max_ref = 0;
      for (size_t k = 0; k < a.size(); ++k) {
        if (!std::isfinite(b[k])) continue;
        if (!std::isfinite(a[k])) {
          return absl::StrCat("result ", i, " element ", k, " is not finite");
        }
        max_diff = std::max(max_diff, std::fabs(double{a[k]} - double{b[k]}));
        max_ref = std::max(max_ref, std::fabs(double{b[k]}));
      }
      const double tol = dtype == ir::DType::kF32 ? 1e-3 : 2e-2;
      if (max_diff > tol * std::max(max_ref, 1e-6)) {
        return absl::StrFormat(
            "result %d: max |candidate - reference| = %.3g, %.3g of the "
            "reference's largest magnitude %.3g (limit %.0e)",
            i, max_diff, max_diff / std::max(max_ref, 1e-30), max_ref, tol);
      }
    }
    return "";
  }

  absl::StatusOr<double> Time(Prepared& p, const TuneOptions& options) {
    const int repeats = std::max(1, options.repeats);
    for (int i = 0; i < options.warmup; ++i) {
      TP_RETURN_IF_ERROR(Run(p, static_cast<size_t>(i) % copies_.size()));
    }
    std::vector<double> ms;
    if (options.graph_replay) {
      TP_ASSIGN_OR_RETURN(const kernels::GraphExec exec,
                          kernels::CaptureGraph(stream_, [&]() -> absl::Status {
                            for (int i = 0; i < repeats; ++i) {
                              TP_RETURN_IF_ERROR(Run(p, static_cast<size_t>(i) % copies_.size()));
                            }
                            return absl::OkStatus();
                          }));
      cudaEvent_t a = nullptr, b = nullptr;
      absl::Status st = TP_CUDA_STATUS(cudaEventCreate(&a));
      st.Update(TP_CUDA_STATUS(cudaEventCreate(&b)));
      st.Update(exec.Launch(stream_));  // warm the graph
      for (int r = 0; r < 7 && st.ok(); ++r) {
        st.Update(TP_CUDA_STATUS(cudaEventRecord(a, stream_)));
        st.Update(exec.Launch(stream_));
        st.Update(TP_CUDA_STATUS(cudaEventRecord(b, stream_)));
        st.Update(TP_CUDA_STATUS(cudaEventSynchronize(b)));
        float t = 0;
        st.Update(TP_CUDA_STATUS(cudaEventElapsedTime(&t, a, b)));
        ms.push_back(t / repeats);
      }
      if (a != nullptr) cudaEventDestroy(a);
      if (b != nullptr) cudaEventDestroy(b);
      TP_RETURN_IF_ERROR(st);
    } else {
      TP_ASSIGN_OR_RETURN(
          ms, device::TimeEach(
                  stream_, repeats,
                  [&](int i) { return Run(p, static_cast<size_t>(i) % copies_.size()); },
                  [&] { return TP_CUDA_STATUS(cudaStreamSynchronize(stream_)); }));
    }
    std::sort(ms.begin(), ms.end());
    return 1e3 * ms[ms.size() / 2];
  }

  Storage& copy0() { return copies_[0]; }

  // TuneOptions::inject_fault: a kernel that executes __trap() on the stream, synchronized.
  // Returns the fault as Sync does (the context is gone).
  absl::Status InjectFault() {
    TP_RETURN_IF_ERROR(launcher_.loader().LaunchTrapFault(stream_));
    TP_ASSIGN_OR_RETURN(std::optional<std::string> error, Sync());
    return absl::InternalError(
        error.has_value() ? absl::StrCat("the trap kernel failed without a fault: ", *error)
                          : "the trap kernel ran without a fault");
  }

  // Completion counters start each candidate at zero (a failed candidate may leave some).
  absl::Status ResetCounters() {
    if (counters_.size() == 0) return absl::OkStatus();
    TP_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(counters_.data(), 0, static_cast<size_t>(counters_.size()), stream_));
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<Storage> Allocate() {
    Storage s;
    for (ir::ValueId root : roots_) {
      TP_ASSIGN_OR_RETURN(
          device::DeviceBuffer b,
          device::DeviceBuffer::Allocate(
              device_, std::max<int64_t>(region_.bound_graph().storage_bytes(root), 16)));
      s.roots.emplace(root, std::move(b));
    }
    return s;
  }

  // The number of experts E when `root` is the expert ids a region reads (the operand whose
  // role is "ids", E the first dim of its "w"), else 0.
  int64_t ExpertsRoutedBy(ir::ValueId root) const {
    const ir::KindSpec* spec = ir::FindKind(region_.kind());
    if (spec == nullptr) return 0;
    int ids = -1, w = -1;
    for (int i = 0; i < region_.num_operands() && i < spec->max_operands(); ++i) {
      if (spec->operands[static_cast<size_t>(i)] == "ids") ids = i;
      if (spec->operands[static_cast<size_t>(i)] == "w") w = i;
    }
    if (ids < 0 || w < 0 || region_.operand(ids).root != root) return 0;
    const std::vector<int64_t>& shape = region_.operand(w).shape;
    return shape.empty() ? 0 : shape[0];
  }

  // Random floats in [-1, 1); token ids inside the embedding table; expert ids as a router
  // of random weights picks them (per token K distinct experts, uniform, so every expert
  // gets about T·K/E rows: a constant id would time one expert's rows, or ids outside
  // [0, E) none); positions as the phase has them (decode: the last T positions before the
  // context, prefill: 0..T-1).
  absl::Status Fill(Storage& s) {
    const kernels::BoundGraph& g = region_.bound_graph();
    std::mt19937 rng(12345);
    uint64_t seed = 1;
    for (auto& [root, buffer] : s.roots) {
      const ir::DType dtype = g.dtype(root);
      const int64_t n = g.storage_bytes(root) / ir::DTypeSize(dtype);
      if (fresh_results_.contains(root)) continue;  // poisoned before every run
      if (dtype != ir::DType::kI32) {
        // On the device: an LM head's weight is 10^8 elements.
        TP_RETURN_IF_ERROR(
            launcher_.loader().FillUniform(buffer.data(), dtype, n, seed++, 1.0f, 0.0f, stream_));
        continue;
      }
      std::vector<int32_t> v(static_cast<size_t>(n));
      const int64_t experts = ExpertsRoutedBy(root);
      if (experts > 0) {
        const std::vector<int64_t>& shape = g.shape(root);
        v = RandomRouting(n, shape.empty() ? 1 : shape.back(), experts, rng());
      } else if (region_.kind() == "embedding" && root == region_.operand(0).root) {
        std::uniform_int_distribution<int32_t> id(
            0, static_cast<int32_t>(region_.operand(1).shape[0]) - 1);
        for (int32_t& x : v) x = id(rng);
      } else {
        const std::vector<int64_t>& shape = g.shape(root);
        const int64_t t = shape.empty() ? 1 : shape.back();
        const int64_t context = g.context();
        for (int64_t i = 0; i < n; ++i) {
          const int64_t pos = i % t;
          v[static_cast<size_t>(i)] = static_cast<int32_t>(context >= t ? context - t + pos : pos);
        }
      }
      TP_RETURN_IF_ERROR(buffer.CopyFromHost(v.data(), n * 4));
    }
    TP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  const device::Device& device_;
  kernels::StepLauncher& launcher_;
  const targets::TargetDescription& target_;
  const BoundRegion& region_;
  const kernels::KernelFamily& family_;
  cudaStream_t stream_ = nullptr;
  std::set<ir::ValueId> roots_, fresh_results_;
  Storage pristine_;
  std::vector<Storage> copies_;
  device::DeviceBuffer workspace_, counters_, error_, rope_;
};

}  // namespace

std::vector<int32_t> RandomRouting(int64_t selections, int64_t top_k, int64_t experts,
                                   uint32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(std::max<int64_t>(selections, 0)));
  if (experts < 1 || top_k < 1) return ids;
  std::mt19937 rng(seed);
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
  for (int64_t i = 0; i < selections; ++i) {
    // A partial Fisher-Yates shuffle per token: its first min(K, E) picks are distinct.
    const int64_t j = (i % top_k) % experts;
    std::uniform_int_distribution<int64_t> pick(j, experts - 1);
    std::swap(order[static_cast<size_t>(j)], order[static_cast<size_t>(pick(rng))]);
    ids[static_cast<size_t>(i)] = order[static_cast<size_t>(j)];
  }
  return ids;
}

std::vector<Tactic> EnumerateCandidates(const kernels::KernelFamily& family,
                                        const BoundRegion& region,
                                        const targets::TargetDescription& target, int max_count,
                                        const std::vector<Tactic>& library_configs) {
  std::vector<Tactic> out;
  absl::StatusOr<kernels::CandidateTable> table = family.Candidates(region, target);
  if (!table.ok()) return out;
  // `from_product`: a combination of the tunables, kept only when worth measuring.
  // Each candidate in its canonical form, so that one the product writes with an optional
  // parameter at 0 is not measured again beside the same tactic without it.
  auto add = [&](const Tactic& given, bool from_product = false) {
    if (static_cast<int>(out.size()) >= max_count) return;
    const Tactic t = family.Canonical(given);
    if (std::find(out.begin(), out.end(), t) != out.end()) return;
    if (!family.ValidateTactic(t, region, target).ok()) return;
    if (from_product && !family.WorthMeasuring(t, region, target)) return;
    out.push_back(t);
  };
  add(table->default_tactic);
  for (const Tactic& t : library_configs) add(t);
  // A library's candidates are its configurations, not the product of the tunables (which
  // describe the cost model's view of it).
  if (family.launch_kind() == kernels::LaunchKind::kLibrary) return out;
  for (const kernels::ByTargetRow& row : table->rows) add(row.tactic);
  // The product of the tunables: combination c (mixed radix, last parameter fastest) for c =
  // 0, s, 2s, ... modulo its size N, with the stride s coprime to N so that every combination
  // comes once. Where the budget holds the whole product s is 1 (the product in order); where
  // it does not, s spreads the candidates measured over every parameter's values, where a
  // prefix of the order would hold the first parameters at their first values.
  const std::vector<kernels::TunableParam>& params = table->tunables;
  if (params.empty()) return out;
  uint64_t size = 1;
  for (const kernels::TunableParam& p : params) {
    if (p.values.empty()) return out;
    size *= p.values.size();
  }
  const uint64_t budget = static_cast<uint64_t>(
      std::max<int64_t>(int64_t{max_count} - static_cast<int64_t>(out.size()), 1));
  uint64_t stride = std::max<uint64_t>(size / budget, 1);
  while (std::gcd(stride, size) != 1) ++stride;
  uint64_t c = 0;
  for (uint64_t n = 0; n < size && static_cast<int>(out.size()) < max_count; ++n) {
    Tactic t = table->default_tactic;
    uint64_t rest = c;
    for (size_t i = params.size(); i-- > 0;) {
      t.params[params[i].name] = params[i].values[rest % params[i].values.size()];
      rest /= params[i].values.size();
    }
    add(t, /*from_product=*/true);
    c = (c + stride) % size;
  }
  return out;
}

absl::StatusOr<FaultInjection> ParseFaultInjection(absl::string_view text) {
  const size_t colon = text.rfind(':');
  FaultInjection f;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &f.candidate) || f.candidate < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--inject-fault takes REGION:CANDIDATE (a text of the region's label or key, "
                     "a candidate index >= 0), not '",
                     text, "'"));
  }
  f.region = std::string(text.substr(0, colon));
  return f;
}

void ChooseWinner(RegionMeasurement& m, bool first_is_default) {
  m.winner.reset();
  m.winner_us = 0;
  m.default_us = 0;
  if (first_is_default && !m.candidates.empty() && m.candidates[0].status == CandidateStatus::kOk) {
    m.default_us = m.candidates[0].median_us;
  }
  for (const CandidateMeasurement& c : m.candidates) {
    if (c.status != CandidateStatus::kOk) continue;
    if (!m.winner || c.median_us < m.winner_us) {
      m.winner = c.tactic;
      m.winner_us = c.median_us;
    }
  }
}

absl::StatusOr<std::vector<Tactic>> RegionTuner::Candidates(const kernels::KernelFamily& family,
                                                            const BoundRegion& region,
                                                            int max_count) {
  std::vector<Tactic> library_configs;
  if (family.launch_kind() == kernels::LaunchKind::kLibrary) {
    TP_ASSIGN_OR_RETURN(const Tactic base, family.DefaultTactic(region, *target_));
    TP_ASSIGN_OR_RETURN(library_configs, launcher_->LibraryConfigs(family, region, base,
                                                                   std::clamp(max_count, 1, 1024)));
  }
  return EnumerateCandidates(family, region, *target_, max_count, library_configs);
}

void RegionTuner::Precompile(const kernels::KernelFamily& family, const BoundRegion& region,
                             const std::vector<Tactic>& candidates) {
  if (family.templates() == nullptr) return;
  std::set<kernels::KernelInstance> unique;
  for (const Tactic& t : candidates) {
    absl::StatusOr<kernels::KernelInstance> instance = kernels::InstanceFor(family, region, t);
    if (instance.ok()) unique.insert(*std::move(instance));
  }
  // Failures are reported by Tune, per candidate.
  (void)launcher_->Precompile(std::vector<kernels::KernelInstance>(unique.begin(), unique.end()));
}

absl::StatusOr<std::vector<CandidateMeasurement>> RegionTuner::Tune(
    const BoundRegion& region, const kernels::KernelFamily& family,
    const std::vector<Tactic>& candidates, const TuneOptions& options,
    const std::function<void(int)>& before_each) {
  TP_RETURN_IF_ERROR(launcher_->device().MakeCurrent());
  Session session(*launcher_, *target_, region, family);
  TP_RETURN_IF_ERROR(session.Setup(candidates, options));
  std::vector<CandidateMeasurement> out;
  std::vector<std::string> reference;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (before_each) before_each(static_cast<int>(i));
    if (static_cast<int>(i) == options.inject_fault) {
      const absl::Status fault = session.InjectFault();
      return absl::Status(fault.code(), absl::StrCat("injected fault: ", fault.message()));
    }
    const Tactic& tactic = candidates[i];
    Prepared prepared;
    if (std::optional<CandidateMeasurement> failed = session.Prepare(tactic, prepared)) {
      out.push_back(*std::move(failed));
      continue;
    }
    // Validate on copy 0.
    TP_RETURN_IF_ERROR(session.Restore(session.copy0()));
    TP_RETURN_IF_ERROR(session.Poison(session.copy0()));
    TP_RETURN_IF_ERROR(session.ResetCounters());
    const absl::Status launched = session.Run(prepared, 0);
    TP_ASSIGN_OR_RETURN(std::optional<std::string> launch_error, session.Sync());
    if (!launched.ok() || launch_error.has_value()) {
      const std::string why = !launched.ok() ? std::string(launched.message()) : *launch_error;
      const bool resources = absl::StrContains(why, "resources") ||
                             absl::StrContains(why, "shared memory") ||
                             absl::StrContains(why, "OutOfResources");
      out.push_back({tactic,
                     resources ? CandidateStatus::kOutOfResources : CandidateStatus::kLaunchError,
                     Shorten(why), 0});
      continue;
    }
    TP_ASSIGN_OR_RETURN(std::vector<std::string> results, session.ReadResults());
    if (reference.empty()) {
      reference = std::move(results);
    } else if (const std::string why = session.Compare(results, reference); !why.empty()) {
      out.push_back({tactic, CandidateStatus::kWrongResult, why, 0});
      continue;
    }
    absl::StatusOr<double> us = session.Time(prepared, options);
    TP_ASSIGN_OR_RETURN(std::optional<std::string> time_error, session.Sync());
    if (!us.ok() || time_error.has_value()) {
      out.push_back({tactic, CandidateStatus::kLaunchError,
                     Shorten(!us.ok() ? us.status().message() : *time_error), 0});
      continue;
    }
    out.push_back({tactic, CandidateStatus::kOk, "", *us});
  }
  return out;
}

}  // namespace tileplan::tuner
