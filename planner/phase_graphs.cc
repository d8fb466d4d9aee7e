#include "planner/phase_graphs.h"

#include <ostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tileplan::planner {
namespace {

// Runs `pipeline` on a copy of `primitive`; `name` labels its printed output and errors.
absl::StatusOr<ir::Graph> RunPipeline(absl::StatusOr<PassPipeline> pipeline,
                                      const ir::Graph& primitive, absl::string_view name,
                                      const PrintOptions& print) {
  ir::Graph graph = primitive;
  absl::Status status = pipeline.status();
  if (status.ok()) {
    if ((print.after_all || !print.after.empty()) && print.out != nullptr) {
      *print.out << "// ===== " << name << " pipeline\n";
    }
    status = pipeline->Run(graph, print).status();
  }
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(name, " pipeline: ", status.message()));
  }
  return graph;
}

}  // namespace

absl::StatusOr<PhaseGraphs> PlanPhases(const ir::Graph& primitive, const PipelineOptions& options,
                                       const PrintOptions& print) {
  PhaseGraphs graphs;
  TP_ASSIGN_OR_RETURN(graphs.prefill,
                      RunPipeline(BuildPrefillPipeline(options), primitive, "prefill", print));
  TP_ASSIGN_OR_RETURN(graphs.decode,
                      RunPipeline(BuildDecodePipeline(options), primitive, "decode", print));
  return graphs;
}

}  // namespace tileplan::planner
