// The built-in kernel families (docs/kernels.md): every folder of kernels/families/, as
// listed in kernels/families/CMakeLists.txt, registered explicitly (no static
// initializers).
#ifndef TILEPLAN_KERNELS_FAMILIES_REGISTRY_H_
#define TILEPLAN_KERNELS_FAMILIES_REGISTRY_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "kernels/core/kernel_family.h"
#include "kernels/core/template_launch.h"

namespace tileplan::kernels {

using FamilyFactory = std::unique_ptr<KernelFamily> (*)();

// Every family folder's factories, sorted by name (generated at build time).
const std::vector<FamilyFactory>& BuiltInFamilyFactories();

// Registers every built-in family.
absl::Status RegisterAllKernelFamilies(KernelRegistry& registry);

// The process-wide registry, filled by RegisterAllKernelFamilies on first use (thread-safe).
const KernelRegistry& GlobalKernelRegistry();

// Every template file the families of `registry` compile, with the core device code, each
// name once, sorted by name: what NVRTC is given to compile any instance.
std::vector<SourceFile> TemplateSources(const KernelRegistry& registry);

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_FAMILIES_REGISTRY_H_
