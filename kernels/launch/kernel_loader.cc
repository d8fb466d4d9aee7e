#include "kernels/launch/kernel_loader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "device/tensor_map.h"

namespace tileplan::kernels {

namespace {

CompileRequest RequestFor(const KernelInstance& instance, int sm) {
  CompileRequest request;
  request.source = instance.source;
  request.name_expressions = instance.name_expressions;
  request.includes = instance.includes;
  request.sm = sm;
  request.arch_specific = instance.arch_specific;
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

absl::Status KernelLoader::Launch(LoadedInstance& loaded, KernelLaunch& launch,
                                  const LaunchOptions& options) {
  if (launch.kernel < 0 || launch.kernel >= static_cast<int>(loaded.kernels.size())) {
    return absl::InvalidArgumentError(absl::StrCat("launch of kernel ", launch.kernel, " of an ",
                                                   "instance with ", loaded.kernels.size(),
                                                   " kernels"));
  }
  const size_t k = static_cast<size_t>(launch.kernel);
  TP_RETURN_IF_ERROR(device_->MakeCurrent());
  const int64_t shared = launch.dynamic_shared_memory_bytes;
  if (shared > loaded.shared_limit[k]) {
    TP_RETURN_IF_ERROR(loaded.kernels[k].SetMaxDynamicSharedMemory(shared));
    loaded.shared_limit[k] = shared;
  }
  for (const TensorMapSpec& spec : launch.tensor_maps) {
    if (spec.param < 0 || spec.param >= launch.params.num_fields()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor map of parameter ", spec.param,
                                                     " of a launch with ",
                                                     launch.params.num_fields(), " parameters"));
    }
    TP_RETURN_IF_ERROR(device::EncodeTensorMap(
        {.address = spec.address,
         .f16 = spec.f16,
         .inner = spec.inner,
         .rows = spec.rows,
         .row_stride_bytes = spec.row_stride_bytes,
         .box_inner = spec.box_inner,
         .box_rows = spec.box_rows},
        launch.params.field(spec.param)));
  }
  device::LaunchConfig config;
  config.grid = launch.grid;
  config.block = launch.block;
  config.dynamic_shared_memory_bytes = shared;
  config.stream = options.stream;
  config.programmatic = options.programmatic;
  config.cooperative = options.cooperative;
  config.cluster = launch.cluster;
  return loaded.kernels[k].Launch(config, launch.params.pointers());
}

absl::Status KernelLoader::Run(const KernelInstance& instance, std::vector<KernelLaunch>& launches,
                               const LaunchOptions& options) {
  TP_ASSIGN_OR_RETURN(LoadedInstance * loaded, Load(instance));
  for (KernelLaunch& launch : launches) TP_RETURN_IF_ERROR(Launch(*loaded, launch, options));
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
  std::vector<KernelLaunch> launches(1);
  KernelLaunch& launch = launches.front();
  launch.grid = {std::min<int64_t>(4096, (n + 255) / 256), 1, 1};
  launch.block = {256, 1, 1};
  FillUniformParams p{};
  p.out = out;
  p.n = n;
  p.seed = seed;
  p.scale = scale;
  p.offset = offset;
  launch.params = KernelParams::Of(p);
  return Run(FillUniformInstance(dtype), launches, {.stream = stream});
}

absl::Status KernelLoader::LaunchTrapFault(cudaStream_t stream) {
  std::vector<KernelLaunch> launches(1);
  return Run(TrapFaultInstance(), launches, {.stream = stream});
}

namespace {
const char* FloatTypeName(ir::DType dtype) {
  return dtype == ir::DType::kBF16  ? "tileplan::bf16"
         : dtype == ir::DType::kF16 ? "tileplan::f16"
                                    : "float";
}
}  // namespace

KernelInstance FillUniformInstance(ir::DType dtype) {
  return {"runtime_support.cuh",
          {absl::StrCat("tileplan::fill_uniform<", FloatTypeName(dtype), ">")},
          {}};
}

KernelInstance AddBiasRowsInstance(ir::DType dtype, ir::DType bias_dtype) {
  return {"runtime_support.cuh",
          {absl::StrCat("tileplan::add_bias_rows<", FloatTypeName(dtype), ", ",
                        FloatTypeName(bias_dtype), ">")},
          {}};
}

KernelLaunch AddBiasRowsLaunch(const AddBiasRowsParams& params) {
  KernelLaunch launch;
  launch.grid = {std::max<int64_t>(1, std::min<int64_t>(1024, (params.rows * params.n + 255) / 256)),
                 1, 1};
  launch.block = {256, 1, 1};
  launch.params = KernelParams::Of(params);
  return launch;
}

KernelInstance DecodeAdvanceInstance() {
  return {"runtime_support.cuh", {"tileplan::decode_advance"}, {}};
}

PersistentInstance PersistentKernelInstance(
    int threads, int min_blocks_per_sm, int stream_slots,
    const std::vector<std::pair<const KernelInstance*, int>>& stages) {
  PersistentInstance out;
  out.instance.source = "persistent.cuh";
  std::vector<std::string> ops;
  for (const auto& [instance, kernel] : stages) {
    // "ns::kernel<args>" runs as the task "ns::kernel_task<args>" (kernel_params.h).
    const std::string& name = instance->name_expressions[static_cast<size_t>(kernel)];
    const size_t open = std::min(name.find('<'), name.size());
    const std::string op = absl::StrCat(name.substr(0, open), "_task", name.substr(open));
    auto found = std::find(ops.begin(), ops.end(), op);
    out.stage_ops.push_back(static_cast<int>(found - ops.begin()));
    if (found == ops.end()) ops.push_back(op);
    std::vector<std::string>& includes = out.instance.includes;
    if (std::find(includes.begin(), includes.end(), instance->source) == includes.end()) {
      includes.push_back(instance->source);
    }
  }
  out.instance.name_expressions = {absl::StrCat("tileplan::persistent_kernel<", threads, ", ",
                                                min_blocks_per_sm, ", ", stream_slots, ", ",
                                                absl::StrJoin(ops, ", "), ">")};
  return out;
}

KernelInstance TrapFaultInstance() { return {"runtime_support.cuh", {"tileplan::trap_fault"}, {}}; }

KernelLaunch DecodeAdvanceLaunch(const DecodeAdvanceParams& params, int64_t batch) {
  KernelLaunch launch;
  launch.grid = {1, 1, 1};
  launch.block = {(batch + 31) / 32 * 32, 1, 1};
  launch.params = KernelParams::Of(params);
  return launch;
}

}  // namespace tileplan::kernels
