// The float32 CPU reference backend: an interpreter for graphs of primitive and fused region
// kinds (a fused region runs the primitive kernels it replaces, so planned and primitive
// graphs compute the same float32 values).
//
// It is the numerical oracle every other backend is checked against, so it favours being
// obviously right over being fast: regions run one after the other in graph order, every
// floating-point tensor is held in float32 (bf16/f16 weights are upcast once at creation),
// reductions (dot products, mean of squares, softmax) accumulate in double, and each kind
// implements docs/ir.md literally. Large loops (linear, lm_head, attention, moe_router,
// expert_linear, moe_combine, mla_attention) are split over a small thread pool; every output
// element is computed by one thread in a fixed order, so results do not depend on the thread
// count.
//
// Symbols: B and Smax are bound at creation (Options::batch, Options::max_seq); every other
// symbol (T for model graphs) is bound per run from the input shapes.
//
// State values (the KV caches) are allocated zeroed at creation and persist across runs, so
// a prompt can be run as one prefill and continued token by token, with the same graph or,
// for a backend of a planned model (CreatePhased), with its decode graph. Reset() zeroes
// them.
// After a run that returned an error the state contents are unspecified; call Reset().
//
// Graphs are checked with ir::Verify at creation. Aliasing: a `view` result (reshape,
// split) is read-only; reshape shares its operand's storage and split copies its slices,
// which is indistinguishable because the verifier rejects in-place updates of views and
// reads of a value after its storage was updated in place. An `inplace` result (kv_write,
// the cache results of the RoPE + KV-write kinds) is its aliased operand's storage.
//
// Not thread-safe: one Run/Execute at a time per backend.
#ifndef TILEPLAN_RUNTIME_CPU_CPU_BACKEND_H_
#define TILEPLAN_RUNTIME_CPU_CPU_BACKEND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/safetensors.h"
#include "regions/ir.h"

namespace tileplan::runtime::cpu {

class InProcessGroup;
class ThreadPool;

// A host tensor in the backend's representation: floating-point dtypes (f32, bf16, f16)
// hold their elements in `f` as float32; i32 holds them in `i`. Row-major, contiguous.
struct HostTensor {
  ir::DType dtype = ir::DType::kF32;
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<int32_t> i;

  int64_t num_elements() const;
  static HostTensor Float(std::vector<int64_t> shape, std::vector<float> data);
  static HostTensor Int(std::vector<int64_t> shape, std::vector<int32_t> data);
};

// The kinds this backend executes, sorted.
std::vector<std::string> CpuSupportedKinds();

class CpuBackend {
 public:
  struct Options {
    int64_t batch = 1;    // binds symbol B
    int64_t max_seq = 0;  // binds symbol Smax, the KV-cache capacity in positions
    int threads = 0;      // worker threads including the caller; 0 = hardware concurrency
    // Tensor parallelism: the group the graph's collective regions meet (not owned; it must
    // outlive the backend) and this backend's rank in it. Null runs a graph whose
    // collectives all have ranks 1 (or none).
    InProcessGroup* group = nullptr;
    int rank = 0;
  };

  // Binds the graph's weights to `checkpoint` (models::BindCheckpoint: exact names, shapes
  // and dtypes, every tensor bound once), upcasts them to float32 and packs every packed
  // weight (concatenating its parts along dim 0), verifies the graph, checks that every
  // kind is implemented (Unimplemented otherwise) and allocates the state. The checkpoint
  // is not referenced after Create returns.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const ir::Graph& graph,
                                                            const models::Checkpoint& checkpoint,
                                                            const Options& options);
  // A backend for two graphs of one model, such as the planner's prefill and decode graphs:
  // Run uses `decode` for steps of one token per sequence and `prefill` for all others.
  // Each graph is bound to `checkpoint` as by Create (weights bound to the same checkpoint
  // tensors are loaded once), and the two share their state: they must declare the same
  // state values (by name) with the same types, so a prompt run by one is continued by the
  // other. Errors name the graph ("decode graph: ...").
  static absl::StatusOr<std::unique_ptr<CpuBackend>> CreatePhased(
      const ir::Graph& prefill, const ir::Graph& decode, const models::Checkpoint& checkpoint,
      const Options& options);
  // As Create, with weights given directly by weight value name (without '%'); every weight
  // of the graph must be present with its declared shape and nothing else.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> CreateWithWeights(
      const ir::Graph& graph, std::map<std::string, HostTensor> weights, const Options& options);

  ~CpuBackend();
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  // Runs a model graph (docs/ir.md conventions: inputs %tokens and %positions i32[B,T], one
  // f32 output [B,T,V]). `tokens` and `positions` are [B,T] row-major with the same size, a
  // non-zero multiple of B. A step with T = 1 runs graph(kDecode), any other
  // graph(kPrefill). Returns the logits [B,T,V] row-major.
  absl::StatusOr<std::vector<float>> Run(const std::vector<int32_t>& tokens,
                                         const std::vector<int32_t>& positions);

  // Runs graph(phase) on `inputs`, which maps every graph input name (without '%') to a
  // tensor whose dtype class (float or i32) and shape match the declared type. Returns the
  // graph outputs in order.
  absl::StatusOr<std::vector<HostTensor>> Execute(const std::map<std::string, HostTensor>& inputs,
                                                  ir::Phase phase = ir::Phase::kGeneral);

  // Zeroes every state value (empties the KV cache).
  void Reset();

  // A copy of the current contents of state `name` (without '%').
  absl::StatusOr<HostTensor> ReadState(absl::string_view name) const;

  int num_threads() const;
  // Whether the backend was created by CreatePhased.
  bool phased() const;
  // The decode graph of a phased backend for kDecode; otherwise its prefill graph, or the
  // one graph of a backend made by Create or CreateWithWeights.
  const ir::Graph& graph(ir::Phase phase = ir::Phase::kGeneral) const;

 private:
  struct Program;

  explicit CpuBackend(const Options& options);
  // Adds a graph with its weights (by value name, exactly the graph's); a second graph shares
  // the first one's state.
  absl::Status AddGraph(const ir::Graph& graph,
                        std::map<std::string, std::shared_ptr<HostTensor>> weights);
  const Program& ProgramFor(ir::Phase phase) const;

  Options options_;
  std::unique_ptr<ThreadPool> pool_;
  std::map<std::string, int64_t> static_symbols_;              // B, Smax
  std::vector<std::unique_ptr<Program>> programs_;             // the (prefill) graph, then decode's
  std::map<std::string, std::shared_ptr<HostTensor>> states_;  // by name, shared by programs
};

}  // namespace tileplan::runtime::cpu

#endif  // TILEPLAN_RUNTIME_CPU_CPU_BACKEND_H_
