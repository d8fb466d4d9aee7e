#include "kernels/kernel_loader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace tileplan::kernels {
namespace {

CompileRequest RequestFor(const KernelInstance& instance, int sm) {
  CompileRequest request;
  request.source = instance.source;
  request.name_expressions = instance.name_expressions;
  request.sm = sm;
  return request;
}

}  // namespace

absl::StatusOr<std::unique_ptr<KernelLoader>> KernelLoader::Create(const device::Device& device,
                                                                   const NvrtcCompiler& compiler) {
  const std::vector<int>& archs = compiler.supported_archs();
  if (!std::binary_search(archs.begin(), archs.end(), device.sm())) {
    return absl::FailedPreconditionError(absl::StrCat(
        device.Label(), ": NVRTC ", compiler.nvrtc_version(), " cannot compile for sm_",
        device.sm(), " (it supports sm_", absl::StrJoin(archs, ", sm_"), ")"));
  }
  return std::unique_ptr<KernelLoader>(new KernelLoader(device, compiler));
}

absl::StatusOr<LoadedInstance*> KernelLoader::Load(const KernelInstance& instance) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = loaded_.find(instance);
  if (it != loaded_.end()) return it->second.get();
  TP_ASSIGN_OR_RETURN(CompiledModule compiled,
                      compiler_->Compile(RequestFor(instance, device_->sm())));
  auto loaded = std::make_unique<LoadedInstance>();
  TP_ASSIGN_OR_RETURN(loaded->module,
                      device::Module::Load(*device_, compiled.cubin,
                                           absl::StrCat(instance.source, " for ", compiled.arch)));
  for (const std::string& name : compiled.lowered_names) {
    TP_ASSIGN_OR_RETURN(device::Kernel kernel, loaded->module->GetKernel(name));
    // Without raising the limit, static and dynamic shared memory share 48 KiB.
    TP_ASSIGN_OR_RETURN(const int64_t static_bytes, kernel.StaticSharedMemoryBytes());
    loaded->shared_limit.push_back(48 * 1024 - static_bytes);
    loaded->kernels.push_back(std::move(kernel));
  }
  LoadedInstance* result = loaded.get();
  loaded_.emplace(instance, std::move(loaded));
  return result;
}

absl::Status KernelLoader::Launch(LoadedInstance& loaded, PreparedLaunch& launch) {
  if (launch.kernel < 0 || launch.kernel >= static_cast<int>(loaded.kernels.size())) {
    return absl::InvalidArgumentError(absl::StrCat("launch of kernel ", launch.kernel, " of an ",
                                                   "instance with ", loaded.kernels.size(),
                                                   " kernels"));
  }
  const size_t k = static_cast<size_t>(launch.kernel);
  TP_RETURN_IF_ERROR(device_->MakeCurrent());
  const int64_t shared = launch.config.dynamic_shared_memory_bytes;
  if (shared > loaded.shared_limit[k]) {
    TP_RETURN_IF_ERROR(loaded.kernels[k].SetMaxDynamicSharedMemory(shared));
    loaded.shared_limit[k] = shared;
  }
  return loaded.kernels[k].Launch(launch.config, launch.args.pointers());
}

absl::Status KernelLoader::Run(const KernelInstance& instance,
                               std::vector<PreparedLaunch>& launches) {
  TP_ASSIGN_OR_RETURN(LoadedInstance * loaded, Load(instance));
  for (PreparedLaunch& launch : launches) TP_RETURN_IF_ERROR(Launch(*loaded, launch));
  return absl::OkStatus();
}

std::vector<absl::Status> KernelLoader::Precompile(
    const std::vector<KernelInstance>& instances) const {
  std::vector<CompileRequest> requests;
  for (const KernelInstance& instance : instances) {
    requests.push_back(RequestFor(instance, device_->sm()));
  }
  return compiler_->CompileInParallel(requests);
}

absl::Status KernelLoader::FillUniform(void* out, ir::DType dtype, int64_t n, uint64_t seed,
                                       float scale, float offset, cudaStream_t stream) {
  std::vector<PreparedLaunch> launches(1);
  PreparedLaunch& launch = launches.front();
  launch.config.grid = {std::min<int64_t>(4096, (n + 255) / 256), 1, 1};
  launch.config.block = {256, 1, 1};
  launch.config.stream = stream;
  launch.args.Add(out)
      .Add(static_cast<long long>(n))
      .Add(static_cast<unsigned long long>(seed))
      .Add(scale)
      .Add(offset);
  return Run(FillUniformInstance(dtype), launches);
}

absl::Status KernelLoader::LaunchTrapFault(cudaStream_t stream) {
  std::vector<PreparedLaunch> launches(1);
  launches.front().config.grid = {1, 1, 1};
  launches.front().config.block = {1, 1, 1};
  launches.front().config.stream = stream;
  return Run(TrapFaultInstance(), launches);
}

}  // namespace tileplan::kernels
