#include "planner/pass.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "planner/passes/passes.h"
#include "regions/printer.h"
#include "regions/syntax.h"
#include "regions/verifier.h"

namespace tileplan::planner {

absl::Status PassRegistry::Register(std::string name, std::string summary, PassFactory factory) {
  if (!ir::IsIdentifier(name)) {
    return absl::InvalidArgumentError(absl::StrCat("pass name '", name, "' is not an identifier"));
  }
  if (!factory) {
    return absl::InvalidArgumentError(absl::StrCat("pass '", name, "' has no factory"));
  }
  if (passes_.count(name)) {
    return absl::AlreadyExistsError(absl::StrCat("pass '", name, "' is registered twice"));
  }
  passes_.emplace(std::move(name), Entry{std::move(summary), std::move(factory)});
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Pass>> PassRegistry::Create(absl::string_view name,
                                                           const PassOptions& options) const {
  auto it = passes_.find(name);
  if (it == passes_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "unknown pass '", name, "' (known passes: ", absl::StrJoin(Names(), ", "), ")"));
  }
  absl::StatusOr<std::unique_ptr<Pass>> pass = it->second.factory(options);
  if (!pass.ok()) {
    return absl::Status(pass.status().code(),
                        absl::StrCat("pass '", name, "': ", pass.status().message()));
  }
  return pass;
}

bool PassRegistry::Has(absl::string_view name) const { return passes_.find(name) != passes_.end(); }

std::vector<std::string> PassRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : passes_) names.push_back(name);
  return names;
}

std::string PassRegistry::Summary(absl::string_view name) const {
  auto it = passes_.find(name);
  return it == passes_.end() ? std::string() : it->second.summary;
}

absl::Status RegisterAllPasses(PassRegistry& registry) {
  for (const PassInfo& info : BuiltinPasses()) {
    TP_RETURN_IF_ERROR(registry.Register(info.name, info.summary, info.factory));
  }
  return absl::OkStatus();
}

const PassRegistry& GlobalPassRegistry() {
  static const PassRegistry* const registry = [] {
    auto* r = new PassRegistry;
    absl::Status status = RegisterAllPasses(*r);
    if (!status.ok()) {
      // The built-in pass list is code, not input: a failure here is a programming error that
      // the registry test reports, so stop rather than run with a partial list.
      std::fprintf(stderr, "tileplan: built-in passes are inconsistent: %s\n",
                   status.ToString().c_str());
      std::abort();
    }
    return r;
  }();
  return *registry;
}

void PassPipeline::Add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }

absl::Status PassPipeline::Add(absl::string_view name, const PassOptions& options) {
  TP_ASSIGN_OR_RETURN(std::unique_ptr<Pass> pass, GlobalPassRegistry().Create(name, options));
  Add(std::move(pass));
  return absl::OkStatus();
}

std::vector<std::string> PassPipeline::PassNames() const {
  std::vector<std::string> names;
  for (const auto& pass : passes_) names.emplace_back(pass->name());
  return names;
}

absl::StatusOr<bool> PassPipeline::Run(ir::Graph& graph, const PrintOptions& print) {
  const std::vector<std::string> names = PassNames();
  const std::set<std::string> in_pipeline(names.begin(), names.end());
  for (const std::string& name : print.after) {
    if (!in_pipeline.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot print after pass '", name, "': the pipeline runs ",
                       names.empty() ? std::string("no passes") : absl::StrJoin(names, ", ")));
    }
  }
  const std::set<std::string> selected(print.after.begin(), print.after.end());
  if ((print.after_all || !selected.empty()) && print.out == nullptr) {
    return absl::InvalidArgumentError("IR printing requested without an output stream");
  }
  if (absl::Status s = ir::Verify(graph); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("input graph: ", s.message()));
  }
  bool changed = false;
  for (size_t i = 0; i < passes_.size(); ++i) {
    Pass& pass = *passes_[i];
    absl::StatusOr<bool> pass_changed = pass.Run(graph);
    if (!pass_changed.ok()) {
      return absl::Status(
          pass_changed.status().code(),
          absl::StrCat("pass '", pass.name(), "': ", pass_changed.status().message()));
    }
    if (absl::Status s = ir::Verify(graph); !s.ok()) {
      return absl::InternalError(absl::StrCat(
          "pass '", pass.name(), "' produced a graph that does not verify: ", s.message()));
    }
    changed = changed || *pass_changed;
    if (print.after_all || selected.count(std::string(pass.name()))) {
      *print.out << "// ----- IR after " << pass.name() << " (pass " << i + 1 << " of "
                 << passes_.size() << ")";
      if (*pass_changed) {
        *print.out << "\n" << ir::PrintGraph(graph);
      } else {
        *print.out << ": unchanged\n";
      }
    }
  }
  return changed;
}

}  // namespace tileplan::planner
