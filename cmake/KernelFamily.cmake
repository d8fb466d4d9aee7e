# tileplan_kernel_family(<name> FACTORIES <function>... SOURCES <file.cc>...
#                        [TEMPLATES <file.cuh|file.h>...] [DEPS <library>...])
#
# One kernel family folder, kernels/families/<name>/ (docs/kernels.md, "Adding a family"): a
# library tileplan_family_<name> of its description and launch half (no CUDA), with its
# templates embedded as tileplan::kernels::<name>::EmbeddedTemplates(). Each FACTORIES entry
# names a `std::unique_ptr<KernelFamily> tileplan::kernels::internal::<function>()` that the
# folder defines; kernels/families/CMakeLists.txt registers them all (the generated
# RegisterAllKernelFamilies), so a folder listed there is the whole registration.
function(tileplan_kernel_family name)
  cmake_parse_arguments(ARG "" "" "FACTORIES;SOURCES;TEMPLATES;DEPS" ${ARGN})
  if(NOT ARG_FACTORIES OR NOT ARG_SOURCES)
    message(FATAL_ERROR "tileplan_kernel_family(${name}): FACTORIES and SOURCES are required")
  endif()
  set(lib tileplan_family_${name})
  add_library(${lib} ${ARG_SOURCES})
  if(ARG_TEMPLATES)
    tileplan_embed_files(${lib} NAMESPACE tileplan::kernels::${name} FUNCTION EmbeddedTemplates
                         FILES ${ARG_TEMPLATES})
  endif()
  target_link_libraries(${lib} PUBLIC tileplan_kernel_core ${ARG_DEPS})
  set_property(GLOBAL APPEND PROPERTY TILEPLAN_KERNEL_FAMILY_FACTORIES ${ARG_FACTORIES})
  set_property(GLOBAL APPEND PROPERTY TILEPLAN_KERNEL_FAMILY_LIBRARIES ${lib})
endfunction()
