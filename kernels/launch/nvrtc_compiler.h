// Run-time compilation of the CUDA C++ kernel templates (kernels/families/<family>/*.cuh) with NVRTC.
//
// A request names one template file and the instantiations wanted as C++ name expressions
// ("tileplan::rms_norm<tileplan::bf16, tileplan::bf16, 256, 1, 8>"). The program is
// `#include "<file>"` (after any other files the request includes) with every template file
// available as a header, compiled for a real
// architecture (sm_XX, or sm_XXa where a template uses architecture-specific instructions)
// to a cubin; the lowered (mangled) name of each instantiation comes back with it for
// cudaLibraryGetKernel. NVRTC needs no GPU, so this runs on any machine with libnvrtc.
//
// Compiled modules are cached on disk (kernels/module_cache.h) under a key made of the
// hash of all template sources, the NVRTC options, the architecture, the NVRTC version and
// the name expressions, so any change to any of them is a miss.
#ifndef TILEPLAN_KERNELS_LAUNCH_NVRTC_COMPILER_H_
#define TILEPLAN_KERNELS_LAUNCH_NVRTC_COMPILER_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/core/template_launch.h"
#include "kernels/launch/module_cache.h"

namespace tileplan::kernels {

// Every template the built-in families compile, the core device code and the runtime's own
// kernels (runtime_support.cuh), sorted by name: the compiler's default sources.
std::vector<SourceFile> AllKernelSources();

struct CompileRequest {
  std::string source;                         // a template file name, e.g. "rms_norm.cuh"
  std::vector<std::string> name_expressions;  // at least one
  int sm = 90;                                // compute capability, major * 10 + minor
  bool arch_specific = false;                 // compile for sm_XXa (wgmma, setmaxnreg, ...)
  std::vector<std::string> includes;          // template files included before `source`
};

struct CompiledModule {
  std::string arch;                        // "sm_90" or "sm_90a"
  std::string cubin;                       // the image for cudaLibraryLoadData
  std::vector<std::string> lowered_names;  // parallel to the request's name_expressions
  std::string log;                         // NVRTC's log (warnings); empty when cached
  bool from_cache = false;
};

class NvrtcCompiler {
 public:
  struct Options {
    // Template files; empty: AllKernelSources().
    std::vector<SourceFile> sources;
    // Disk cache directory; nullopt: ModuleCache::DefaultDirectory(). Ignored when
    // use_disk_cache is false.
    std::optional<std::string> cache_directory;
    bool use_disk_cache = true;
  };

  // Loads NVRTC's version and architectures and opens the cache. FailedPrecondition when
  // the cache directory cannot be used.
  static absl::StatusOr<std::unique_ptr<NvrtcCompiler>> Create(Options options);

  // Compiles (or fetches from the cache) one module. InvalidArgument for a request naming
  // an unknown file, an architecture this NVRTC cannot target or no instantiations; a
  // failed compilation returns InvalidArgument carrying the file, architecture, every
  // name expression and NVRTC's full log. Thread-safe.
  absl::StatusOr<CompiledModule> Compile(const CompileRequest& request) const;
  // Compile of every request, on all host cores at once (each into the disk cache); the
  // statuses in request order.
  std::vector<absl::Status> CompileInParallel(const std::vector<CompileRequest>& requests) const;

  // The cache key of a request (exposed for tests and tools).
  std::string CacheKey(const CompileRequest& request) const;

  // NVRTC's version, "13.0".
  const std::string& nvrtc_version() const { return nvrtc_version_; }
  // Architectures NVRTC can compile for (nvrtcGetSupportedArchs), ascending, e.g. 80, 90.
  const std::vector<int>& supported_archs() const { return supported_archs_; }
  // The NVRTC options every compilation uses besides the architecture.
  static std::vector<std::string> BaseOptions();
  const ModuleCache* cache() const { return cache_.get(); }

 private:
  NvrtcCompiler() = default;
  absl::StatusOr<CompiledModule> CompileUncached(const CompileRequest& request,
                                                 const std::string& arch) const;

  std::vector<SourceFile> sources_;
  std::string sources_hash_;  // 16 hex digits over every file's name and contents
  std::string nvrtc_version_;
  std::vector<int> supported_archs_;
  std::unique_ptr<ModuleCache> cache_;  // null: no disk cache
};

// "sm_90" / "sm_90a".
std::string ArchName(int sm, bool arch_specific);

}  // namespace tileplan::kernels

#endif  // TILEPLAN_KERNELS_LAUNCH_NVRTC_COMPILER_H_
