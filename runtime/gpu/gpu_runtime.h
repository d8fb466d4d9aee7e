// The GPU runtime: executes an ExecutionPlan (planner/plan.proto, docs/plan.md) on one device
// (docs/runtime.md).
//
// Create does every expensive thing once: checks the plan against the device, uploads the
// weights (from a checkpoint, packing QKV and gate/up on the way, or random on the device),
// allocates the KV cache (the plan's state space, zeroed) and one arena as large as the
// largest phase's (phases never run at the same time), compiles every kernel the plan names
// with NVRTC for the device's sm_XX (or takes it from the disk cache), resolves every
// cuBLASLt algo, runs every phase once and captures each as a CUDA Graph: one per prefill
// token bucket, one per decode batch bucket, and for each decode bucket a second graph that
// also takes the greedy argmax and advances the positions, so a whole greedy generation is
// that graph replayed with no host work between tokens. Positions live in device memory and
// attention reads each sequence's context from them, so one graph serves every context.
//
// Two ways in. The vector forms (Prefill, Decode, Generate) take and return host vectors and
// run on the runtime's own stream, waiting for the result. The Enqueue forms, for runtimes
// that embed tileplan (the C API, docs/embedding.md), enqueue the same work on a stream the
// caller owns, reading and writing the caller's buffers: device memory of the runtime's
// device (then the call returns without waiting) or host memory (then the call returns when
// the stream has finished with it).
//
// Not thread-safe: one call at a time, and work of one runtime enqueued on several streams
// must be ordered by the caller (the runtime's buffers are shared by all its calls).
#ifndef TILEPLAN_RUNTIME_GPU_GPU_RUNTIME_H_
#define TILEPLAN_RUNTIME_GPU_GPU_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/device.h"
#include "device/nccl.h"
#include "models/safetensors.h"
#include "planner/plan.pb.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace tileplan::runtime::gpu {

struct GpuOptions;
// "never", "decode", "always"; InvalidArgument for anything else.
absl::Status ParseProgrammaticLaunch(absl::string_view text, GpuOptions& options);

struct GpuOptions {
  // Replay phases as CUDA Graphs (the default); false launches every kernel from the host
  // on every call (for comparison and debugging).
  bool cuda_graphs = true;
  // Which phases launch their kernel templates with programmatic dependent launch (sm_90+):
  // each kernel's launch overlaps the previous kernel's tail (kernels wait for their inputs
  // in the kernel). Measured on the H200 (docs/PERF.md): decode steps gain about 14%; prefill
  // gains at 512 tokens and loses at 128, so by default only decode phases use it.
  enum class ProgrammaticLaunch { kNever, kDecode, kAlways };
  ProgrammaticLaunch programmatic_launch = ProgrammaticLaunch::kDecode;
  // Seed of the random weights when no checkpoint is given.
  uint64_t seed = 1;
  // Device memory for cuBLASLt's workspace, shared by every GEMM step.
  int64_t cublaslt_workspace_bytes = 32 << 20;
  // A tensor-parallel rank's communicator (device/nccl.h; it must outlive the runtime): a
  // plan of several ranks runs only with one of that many ranks, of the plan's rank, on the
  // runtime's device; its collective steps run on it. runtime/gpu/tensor_parallel.h makes
  // the communicators and runs every rank.
  const device::Communicator* communicator = nullptr;
  // Persistent decode kernels record every task's timestamps (PersistentDecodeTrace); a
  // diagnostic, at the cost of four stores a task.
  bool persistent_trace = false;
};

// What Create set up, for reports.
struct GpuRuntimeInfo {
  int64_t weight_bytes = 0;
  int64_t state_bytes = 0;
  int64_t arena_bytes = 0;
  int kernels_compiled = 0;    // distinct NVRTC instances the plan needs
  double setup_seconds = 0;    // Create, end to end
  double compile_seconds = 0;  // NVRTC compiles and module loads
  double weights_seconds = 0;  // weight upload or generation
  // One line per GEMM step kind and shape: the cuBLASLt algo each default tactic resolved to.
  std::vector<std::string> gemm_algos;
};

class GpuRuntime {
 public:
  // `plan` must target the device's architecture (its target's sm equal to the device's).
  // `checkpoint` null: random weights (GpuOptions::seed). Errors: FailedPrecondition for a
  // plan of another architecture; ResourceExhausted naming the bytes asked (weights, KV
  // cache, arena, workspace) and the bytes free; the NVRTC log of a kernel that does not
  // compile; checkpoint errors naming the tensor.
  static absl::StatusOr<std::unique_ptr<GpuRuntime>> Create(
      const device::Device& device, const planner::proto::ExecutionPlan& plan,
      const models::Checkpoint* checkpoint, const GpuOptions& options);
  ~GpuRuntime();
  GpuRuntime(const GpuRuntime&) = delete;
  GpuRuntime& operator=(const GpuRuntime&) = delete;

  const GpuRuntimeInfo& info() const { return info_; }
  int64_t vocab_size() const;
  int64_t max_context() const;  // KV-cache rows per sequence (Smax)
  int64_t prefill_batch() const;

  // Empties the KV cache (zeroes it).
  absl::Status Reset();

  // Runs the prompts `tokens` ([B, T] row-major, B = the plan's prefill batch) from an empty
  // cache (Reset first) at positions 0..T-1, with the smallest prefill bucket holding T
  // tokens (the rest padded; the padding's cache rows are overwritten by later steps and its
  // logits dropped). Returns the logits [B, T, V], or [B, 1, V] (each prompt's last token)
  // when the plan was made with PlanOptions::prefill_last_token_logits. InvalidArgument when no
  // bucket holds T or B is not the plan's; the cache is left as the prompts made it.
  absl::StatusOr<std::vector<float>> Prefill(const std::vector<int32_t>& tokens, int64_t batch);

  // One decode step: token b at position positions[b] for each sequence b of a decode bucket
  // of exactly B = tokens.size() sequences, attending to the cache rows 0..positions[b].
  // Returns the logits [B, V]. InvalidArgument (nothing run) for a position at or beyond the
  // KV cache.
  absl::StatusOr<std::vector<float>> Decode(const std::vector<int32_t>& tokens,
                                            const std::vector<int32_t>& positions);

  // Greedy generation of `new_tokens` tokens after prompts [B, T]: Prefill, the argmax of
  // each prompt's last logits, then new_tokens - 1 replays of the decode-and-argmax graph
  // with no host synchronization between them. Returns the tokens [B, new_tokens].
  // InvalidArgument when T + new_tokens - 1 exceeds the KV cache (nothing run).
  absl::StatusOr<std::vector<int32_t>> Generate(const std::vector<int32_t>& prompts, int64_t batch,
                                                int new_tokens);

  // The caller-stream forms. `stream`: a stream of the runtime's device, or nullptr for the
  // legacy default stream. Pointers are device memory of the runtime's device or host memory
  // (unified addressing tells which); a call given any host pointer returns only when the
  // stream has run its work, and reports the kernels' errors as Synchronize does. Arguments
  // are checked before anything is enqueued (InvalidArgument, nothing run); errors the kernels
  // detect in device-resident inputs (a token id outside the vocabulary, a position outside
  // the KV cache) are reported by Synchronize, and the affected rows are skipped.
  //
  // Prefill of prompts [batch, tokens] as Prefill runs it: logits [batch, tokens, V], or
  // [batch, 1, V] with prefill_last_token_logits; logits nullptr keeps them on the device.
  absl::Status EnqueuePrefill(CUstream_st* stream, const int32_t* tokens, int64_t batch,
                              int64_t tokens_per_sequence, float* logits);
  // One decode step as Decode runs it: tokens and positions [batch], logits [batch, V].
  absl::Status EnqueueDecode(CUstream_st* stream, const int32_t* tokens, const int32_t* positions,
                             int64_t batch, float* logits);
  // Greedy generation as Generate runs it, entirely on the device: the prefill, the argmax of
  // each prompt's last logits, then new_tokens - 1 replays of the decode-and-argmax graph.
  // `out` receives the tokens [batch, new_tokens].
  absl::Status EnqueueGenerate(CUstream_st* stream, const int32_t* prompts, int64_t batch,
                               int64_t prompt_tokens, int new_tokens, int32_t* out);
  // Waits for `stream`, then reports (and clears) an error the kernels raised since the last
  // report: InvalidArgument naming the flat token index.
  absl::Status Synchronize(CUstream_st* stream);

  // Benchmarks (CUDA events on the runtime's stream; each element one replay, in ms).
  // Prefill of `tokens` [B, T] as Prefill runs it, `iterations` times after `warmup`.
  absl::StatusOr<std::vector<double>> TimePrefill(const std::vector<int32_t>& tokens, int64_t batch,
                                                  int warmup, int iterations);
  // The decode step at context `context` for a batch of B sequences whose caches hold
  // context - 1 tokens (which the caller put there, e.g. with Prefill): each replay writes
  // cache row context - 1 and attends to `context` rows, so replays are identical.
  absl::StatusOr<std::vector<double>> TimeDecode(int64_t batch, int64_t context, int warmup,
                                                 int iterations);

  // Where a phase's time goes: every step launched from the host between CUDA events
  // (without graphs, so each step's time includes no launch gaps), `iterations` times; the
  // median per step. Inputs as TimePrefill / TimeDecode leave them (call one first).
  struct StepTime {
    int step = 0;
    std::string name;  // the step's name (its first result)
    std::string kind;
    std::string family;
    double median_ms = 0;
  };
  absl::StatusOr<std::vector<StepTime>> ProfilePrefill(int64_t batch, int64_t tokens,
                                                       int iterations);
  absl::StatusOr<std::vector<StepTime>> ProfileDecode(int64_t batch, int iterations);

  // With GpuOptions::persistent_trace, where the last finished decode step of `batch` spent
  // its time in its persistent runs, one row per stage (docs/runtime.md, "Persistent
  // decode"). A stage's span runs from the end of the stage before (its last task released;
  // for a run's first stage, the first task reached) to its own end; the handover from that
  // end to the first of its blocks past the wait; tile_wait and run are medians over its
  // tasks of the wait for the task's tile after the dependency wait and of the task itself
  // (body, barrier, release); last_ready and last_run are those of the task released last,
  // which ends the span: from the stage before's end to that task past its wait, and the task
  // itself. FailedPrecondition without the trace or without a run.
  struct StageTrace {
    int step = 0;
    std::string name, kind;
    int64_t tasks = 0;
    double span_us = 0, handover_us = 0, tile_wait_us = 0, run_us = 0;
    double last_ready_us = 0, last_run_us = 0;
  };
  absl::StatusOr<std::vector<StageTrace>> PersistentDecodeTrace(int64_t batch);

 private:
  struct Impl;
  explicit GpuRuntime(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  GpuRuntimeInfo info_;
};

}  // namespace tileplan::runtime::gpu

#endif  // TILEPLAN_RUNTIME_GPU_GPU_RUNTIME_H_
