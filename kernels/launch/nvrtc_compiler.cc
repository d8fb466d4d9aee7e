#include "kernels/launch/nvrtc_compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <string_view>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "device/cuda_status.h"
#include "kernels/families/registry.h"

namespace tileplan::kernels {

// runtime_support.cuh, persistent.cuh and their params headers, embedded in
// tileplan_kernel_launch.
const std::vector<std::pair<std::string_view, std::string_view>>& EmbeddedSupportKernels();

namespace {

// Releases an nvrtcProgram on every path.
class ProgramGuard {
 public:
  explicit ProgramGuard(nvrtcProgram* program) : program_(program) {}
  ~ProgramGuard() {
    if (*program_ != nullptr) nvrtcDestroyProgram(program_);
  }

 private:
  nvrtcProgram* program_;
};

std::string ProgramLog(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);  // drop the terminating NUL
  return log;
}

// Payload of a cache entry: u32 count | (u32 length | name) per lowered name | cubin.
std::string SerializeModule(const CompiledModule& module) {
  std::string out;
  auto put_u32 = [&out](uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put_u32(static_cast<uint32_t>(module.lowered_names.size()));
  for (const std::string& name : module.lowered_names) {
    put_u32(static_cast<uint32_t>(name.size()));
    out += name;
  }
  out += module.cubin;
  return out;
}

std::optional<CompiledModule> ParseModule(absl::string_view data, size_t expected_names) {
  size_t at = 0;
  auto get_u32 = [&](uint32_t& v) {
    if (data.size() - at < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) {
      v |= static_cast<uint32_t>(static_cast<unsigned char>(data[at + i])) << (8 * i);
    }
    at += 4;
    return true;
  };
  uint32_t count = 0;
  if (!get_u32(count) || count != expected_names) return std::nullopt;
  CompiledModule module;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t length = 0;
    if (!get_u32(length) || data.size() - at < length) return std::nullopt;
    module.lowered_names.emplace_back(data.substr(at, length));
    at += length;
  }
  module.cubin = std::string(data.substr(at));
  if (module.cubin.empty()) return std::nullopt;
  module.from_cache = true;
  return module;
}

}  // namespace

std::vector<SourceFile> AllKernelSources() {
  std::vector<SourceFile> files = TemplateSources(GlobalKernelRegistry());
  for (SourceFile& f : ToSourceFiles(EmbeddedSupportKernels())) files.push_back(std::move(f));
  std::sort(files.begin(), files.end(),
            [](const SourceFile& a, const SourceFile& b) { return a.name < b.name; });
  return files;
}

std::string ArchName(int sm, bool arch_specific) {
  return absl::StrCat("sm_", sm, arch_specific ? "a" : "");
}

std::vector<std::string> NvrtcCompiler::BaseOptions() { return {"-std=c++17", "-lineinfo"}; }

absl::StatusOr<std::unique_ptr<NvrtcCompiler>> NvrtcCompiler::Create(Options options) {
  std::unique_ptr<NvrtcCompiler> compiler(new NvrtcCompiler());
  compiler->sources_ = options.sources.empty() ? AllKernelSources() : std::move(options.sources);
  std::sort(compiler->sources_.begin(), compiler->sources_.end(),
            [](const SourceFile& a, const SourceFile& b) { return a.name < b.name; });
  uint64_t hash = Fnv1a64("");
  for (const SourceFile& file : compiler->sources_) {
    hash = Fnv1a64(absl::StrCat(file.name.size(), ":", file.name, file.contents.size(), ":"), hash);
    hash = Fnv1a64(file.contents, hash);
  }
  compiler->sources_hash_ = absl::StrFormat("%016x", hash);

  int major = 0, minor = 0;
  TP_NVRTC_RETURN_IF_ERROR(nvrtcVersion(&major, &minor));
  compiler->nvrtc_version_ = absl::StrCat(major, ".", minor);
  int count = 0;
  TP_NVRTC_RETURN_IF_ERROR(nvrtcGetNumSupportedArchs(&count));
  compiler->supported_archs_.resize(static_cast<size_t>(count));
  TP_NVRTC_RETURN_IF_ERROR(nvrtcGetSupportedArchs(compiler->supported_archs_.data()));
  std::sort(compiler->supported_archs_.begin(), compiler->supported_archs_.end());

  if (options.use_disk_cache) {
    std::string directory;
    if (options.cache_directory.has_value()) {
      directory = *options.cache_directory;
    } else {
      TP_ASSIGN_OR_RETURN(directory, ModuleCache::DefaultDirectory());
    }
    TP_ASSIGN_OR_RETURN(compiler->cache_, ModuleCache::Open(std::move(directory)));
  }
  return compiler;
}

std::string NvrtcCompiler::CacheKey(const CompileRequest& request) const {
  return absl::StrCat("tileplan-module-v1\nsources=", sources_hash_, "\nsource=", request.source,
                      "\nincludes=", absl::StrJoin(request.includes, " "),
                      "\narch=", ArchName(request.sm, request.arch_specific),
                      "\nnvrtc=", nvrtc_version_, "\noptions=", absl::StrJoin(BaseOptions(), " "),
                      "\nnames=", absl::StrJoin(request.name_expressions, "\n      "));
}

absl::StatusOr<CompiledModule> NvrtcCompiler::Compile(const CompileRequest& request) const {
  const std::string arch = ArchName(request.sm, request.arch_specific);
  std::vector<std::string> files = request.includes;
  files.push_back(request.source);
  for (const std::string& file : files) {
    const bool known = std::any_of(sources_.begin(), sources_.end(),
                                   [&](const SourceFile& f) { return f.name == file; });
    if (!known) {
      std::vector<std::string> names;
      for (const SourceFile& f : sources_) names.push_back(f.name);
      return absl::InvalidArgumentError(absl::StrCat("no kernel template named '", file,
                                                     "'; templates: ", absl::StrJoin(names, ", ")));
    }
  }
  if (request.name_expressions.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("compiling ", request.source, " for ", arch, ": no instantiation named"));
  }
  if (!std::binary_search(supported_archs_.begin(), supported_archs_.end(), request.sm) ||
      (request.arch_specific && request.sm < 90)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NVRTC ", nvrtc_version_, " cannot compile for ", arch, "; it supports sm_",
                     absl::StrJoin(supported_archs_, ", sm_"), " (and sm_XXa from sm_90)"));
  }
  const std::string key = CacheKey(request);
  if (cache_ != nullptr) {
    if (std::optional<std::string> hit = cache_->Lookup(key)) {
      if (std::optional<CompiledModule> module =
              ParseModule(*hit, request.name_expressions.size())) {
        module->arch = arch;
        return *std::move(module);
      }
    }
  }
  TP_ASSIGN_OR_RETURN(CompiledModule module, CompileUncached(request, arch));
  // A cache that cannot be written costs a recompilation next time, nothing more.
  if (cache_ != nullptr) cache_->Store(key, SerializeModule(module)).IgnoreError();
  return module;
}

absl::StatusOr<CompiledModule> NvrtcCompiler::CompileUncached(const CompileRequest& request,
                                                              const std::string& arch) const {
  std::vector<const char*> header_names, header_contents;
  for (const SourceFile& file : sources_) {
    header_names.push_back(file.name.c_str());
    header_contents.push_back(file.contents.c_str());
  }
  std::string program_text;
  for (const std::string& file : request.includes) {
    absl::StrAppend(&program_text, "#include \"", file, "\"\n");
  }
  absl::StrAppend(&program_text, "#include \"", request.source, "\"\n");
  const std::string program_name = absl::StrCat("tileplan_", request.source, ".cu");
  nvrtcProgram program = nullptr;
  ProgramGuard guard(&program);
  TP_NVRTC_RETURN_IF_ERROR(nvrtcCreateProgram(&program, program_text.c_str(), program_name.c_str(),
                                              static_cast<int>(header_names.size()),
                                              header_contents.data(), header_names.data()));
  for (const std::string& expression : request.name_expressions) {
    TP_NVRTC_RETURN_IF_ERROR(nvrtcAddNameExpression(program, expression.c_str()));
  }
  std::vector<std::string> options = BaseOptions();
  options.push_back(absl::StrCat("--gpu-architecture=", arch));
  std::vector<const char*> option_pointers;
  for (const std::string& option : options) option_pointers.push_back(option.c_str());

  const nvrtcResult result = nvrtcCompileProgram(program, static_cast<int>(option_pointers.size()),
                                                 option_pointers.data());
  CompiledModule module;
  module.arch = arch;
  module.log = ProgramLog(program);
  if (result != NVRTC_SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("NVRTC compilation of ", request.source, " for ", arch, " failed (",
                     nvrtcGetErrorString(result), ")\ninstantiations:\n  ",
                     absl::StrJoin(request.name_expressions, "\n  "),
                     "\noptions: ", absl::StrJoin(options, " "), "\nlog:\n", module.log));
  }
  for (const std::string& expression : request.name_expressions) {
    const char* lowered = nullptr;
    TP_NVRTC_RETURN_IF_ERROR(nvrtcGetLoweredName(program, expression.c_str(), &lowered));
    module.lowered_names.emplace_back(lowered);
  }
  size_t cubin_size = 0;
  TP_NVRTC_RETURN_IF_ERROR(nvrtcGetCUBINSize(program, &cubin_size));
  module.cubin.resize(cubin_size);
  TP_NVRTC_RETURN_IF_ERROR(nvrtcGetCUBIN(program, module.cubin.data()));
  return module;
}

std::vector<absl::Status> NvrtcCompiler::CompileInParallel(
    const std::vector<CompileRequest>& requests) const {
  std::vector<absl::Status> status(requests.size());
  std::atomic<size_t> next{0};
  const unsigned workers = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                                           static_cast<unsigned>(requests.size())));
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < requests.size(); i = next++) {
        status[i] = Compile(requests[i]).status();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return status;
}

}  // namespace tileplan::kernels
