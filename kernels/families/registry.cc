#include "kernels/families/registry.h"

#include <cstdio>
#include <cstdlib>
#include <map>

#include "base/status_macros.h"

namespace tileplan::kernels {

absl::Status RegisterAllKernelFamilies(KernelRegistry& registry) {
  for (FamilyFactory make : BuiltInFamilyFactories()) {
    TP_RETURN_IF_ERROR(registry.Register(make()));
  }
  return absl::OkStatus();
}

const KernelRegistry& GlobalKernelRegistry() {
  static const KernelRegistry* const registry = [] {
    auto* r = new KernelRegistry;
    absl::Status status = RegisterAllKernelFamilies(*r);
    if (!status.ok()) {
      // The built-in family table is code, not input: a failure is a programming error that
      // the kernels test reports, so stop rather than plan with a partial table.
      std::fprintf(stderr, "tileplan: built-in kernel families are inconsistent: %s\n",
                   status.ToString().c_str());
      std::abort();
    }
    return r;
  }();
  return *registry;
}

std::vector<SourceFile> TemplateSources(const KernelRegistry& registry) {
  std::map<std::string, std::string> by_name;
  for (SourceFile& f : CoreTemplateSources()) by_name.emplace(f.name, std::move(f.contents));
  for (const KernelFamily* family : registry.families()) {
    if (family->templates() == nullptr) continue;
    for (SourceFile& f : family->templates()->Sources()) {
      by_name.emplace(f.name, std::move(f.contents));
    }
  }
  std::vector<SourceFile> out;
  for (auto& [name, contents] : by_name) out.push_back({name, std::move(contents)});
  return out;
}

}  // namespace tileplan::kernels
