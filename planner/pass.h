// The planner's pass manager: named graph-to-graph passes, their registry, and pipelines.
//
// A Pass rewrites an ir::Graph and reports whether it changed it. Passes find their sites
// by pattern on the IR (docs/planner.md lists each pattern); a pass that meets a site it
// recognizes but cannot rewrite returns an error naming the region, it never skips it
// silently. Passes are created by name from a PassRegistry, which RegisterAllPasses fills
// explicitly (no static initializers). A PassPipeline runs passes in order, verifies the
// graph (ir::Verify) before the first pass and after every pass, and can print the IR after
// passes for debugging.
#ifndef TILEPLAN_PLANNER_PASS_H_
#define TILEPLAN_PLANNER_PASS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "regions/ir.h"

namespace tileplan::planner {

class Pass {
 public:
  virtual ~Pass() = default;

  // The registry name, e.g. "pack_qkv".
  virtual absl::string_view name() const = 0;

  // Rewrites `graph`; returns whether anything changed. REQUIRES: `graph` verifies. On error
  // `graph` is left as it was, and the message names the offending region.
  virtual absl::StatusOr<bool> Run(ir::Graph& graph) = 0;
};

// Parameters pass factories may read: specialize_phase reads the phase and the extents,
// fuse_norm_linear its row limit and norm_moe, fuse_rope_kv_write_attention and fuse_moe the
// phase (they refuse any but decode) and the batch with their batch limits; no other pass
// reads any.
struct PassOptions {
  // The phase specialize_phase specializes for: kPrefill or kDecode.
  ir::Phase phase = ir::Phase::kDecode;
  // The extent bound to the symbol T (new tokens per step): the prefill token bucket, 1 for
  // decode. Must be positive.
  int64_t tokens = 1;
  // Extents bound to B (batch) and Smax (KV-cache capacity); the symbols stay when unset.
  std::optional<int64_t> batch;
  std::optional<int64_t> cache_capacity;
  // fuse_norm_linear fuses an rms_norm into a decode linear of at most this many rows
  // (batch x new tokens); larger decode linears run on cuBLASLt, which has no norm
  // prologue. Must be >= 0 (0 fuses nothing).
  int64_t norm_linear_max_rows = 4;
  // fuse_norm_linear also folds the norm of a moe region into it (rms_norm_moe). On by
  // default since moe_gemv selects the top-k in its gate/up CTAs at one token: on the H100 it
  // made Qwen3-30B-A3B's decode 1.8% faster and DeepSeek-V2-Lite's 3.2% (docs/PERF.md).
  bool norm_moe = true;
  // fuse_rope_kv_write_attention leaves a decode graph whose bound batch exceeds this alone:
  // at large batches the attention's own families (the tensor-core attention_prefill with
  // the GQA group packed into its rows) may beat the split-KV kernel that the fused kind is
  // limited to, and the RoPE + KV write it saves is a small share of such a step (Qwen2-7B
  // batch 16 fused decoded 2.5% slower on the H100: docs/PERF.md). An unbound batch fuses.
  // Must be >= 0.
  int64_t rope_attention_max_batch = 4;
  // fuse_moe leaves a decode graph whose bound batch exceeds this alone: the fused kind's
  // kernels (moe_gemv) hold every token's accumulators for every slot, so past a few tokens
  // the unfused expert steps win (on the H200 at batch 1 and 2 the fused step is faster, at
  // 4, 8 and 16 slower: docs/PERF.md). An unbound batch fuses. Must be >= 0.
  int64_t moe_max_batch = 2;
};

// Creates a pass; fails with InvalidArgument when the options do not suit it.
using PassFactory = std::function<absl::StatusOr<std::unique_ptr<Pass>>(const PassOptions&)>;

class PassRegistry {
 public:
  // AlreadyExists for a name registered before; InvalidArgument for a name that is not an
  // identifier or a missing factory.
  absl::Status Register(std::string name, std::string summary, PassFactory factory);

  // NotFound (listing the registered names) for an unknown name; the factory's error
  // otherwise.
  absl::StatusOr<std::unique_ptr<Pass>> Create(absl::string_view name,
                                               const PassOptions& options) const;

  bool Has(absl::string_view name) const;
  std::vector<std::string> Names() const;  // sorted
  // One line describing the pass; empty for an unknown name.
  std::string Summary(absl::string_view name) const;

 private:
  struct Entry {
    std::string summary;
    PassFactory factory;
  };
  std::map<std::string, Entry, std::less<>> passes_;
};

// Registers every pass tileplan has (planner/passes/passes.h).
absl::Status RegisterAllPasses(PassRegistry& registry);

// The process-wide registry, filled by RegisterAllPasses on first use (thread-safe).
const PassRegistry& GlobalPassRegistry();

// What PassPipeline::Run prints, and where.
//
// After each selected pass that changed the graph it writes a header line
//   // ----- IR after <pass> (pass <i> of <n>)
// followed by the whole graph in canonical text (regions/printer.h). After a selected pass
// that left the graph unchanged it writes only
//   // ----- IR after <pass> (pass <i> of <n>): unchanged
// so every selected pass is accounted for while identical graphs are not repeated. The
// header lines are IR comments, and the separator is the golden-test case marker, so the
// output can be cut into parseable graphs.
struct PrintOptions {
  bool after_all = false;
  std::vector<std::string> after;  // pass names; each must occur in the pipeline
  std::ostream* out = nullptr;     // REQUIRES: non-null when anything is selected
};

class PassPipeline {
 public:
  PassPipeline() = default;
  PassPipeline(PassPipeline&&) = default;
  PassPipeline& operator=(PassPipeline&&) = default;

  void Add(std::unique_ptr<Pass> pass);
  // Creates `name` from the global registry with `options` and appends it.
  absl::Status Add(absl::string_view name, const PassOptions& options);

  std::vector<std::string> PassNames() const;  // in run order
  bool empty() const { return passes_.empty(); }

  // Verifies `graph`, then runs every pass in order and verifies after each. Returns
  // whether any pass changed the graph. Errors: InvalidArgument "input graph: <verifier
  // message>" for an input that does not verify; "pass '<name>': <message>" for a pass that
  // fails (with the pass's status code), and Internal "pass '<name>' produced a graph that
  // does not verify: <message>" for one that breaks the graph; InvalidArgument for print options
  // naming a pass the pipeline does not run. On a pass error `graph` holds the result of the
  // passes before the failing one; when a pass broke the graph, that pass's output.
  absl::StatusOr<bool> Run(ir::Graph& graph, const PrintOptions& print = {});

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace tileplan::planner

#endif  // TILEPLAN_PLANNER_PASS_H_
