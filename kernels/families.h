// Factories of the built-in kernel families (one file each; docs/kernels.md has their
// ByTarget tables). RegisterAllKernelFamilies registers them all.
#ifndef TILEPLAN_KERNELS_FAMILIES_H_
#define TILEPLAN_KERNELS_FAMILIES_H_

#include <memory>

#include "kernels/kernel_family.h"

namespace tileplan::kernels::internal {

std::unique_ptr<KernelFamily> MakeArgmaxFamily();
std::unique_ptr<KernelFamily> MakeAttentionDecodeFamily();
std::unique_ptr<KernelFamily> MakeAttentionPrefillFamily();
std::unique_ptr<KernelFamily> MakeCublasLtGemmFamily();
std::unique_ptr<KernelFamily> MakeElementwiseFamily();
std::unique_ptr<KernelFamily> MakeEmbeddingGatherFamily();
std::unique_ptr<KernelFamily> MakeGemvFamily();
std::unique_ptr<KernelFamily> MakeRmsNormFamily();
std::unique_ptr<KernelFamily> MakeRopeKvWriteFamily();
std::unique_ptr<KernelFamily> MakeViewFamily();

}  // namespace tileplan::kernels::internal

#endif  // TILEPLAN_KERNELS_FAMILIES_H_
