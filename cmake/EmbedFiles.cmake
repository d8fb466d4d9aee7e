# tileplan_embed_files(<target> NAMESPACE <ns> FUNCTION <fn> FILES <file>...)
#
# Generates a C++ source defining, in namespace <ns>,
#   const std::vector<std::pair<std::string_view, std::string_view>>& <fn>();
# that returns (file name, contents) for every listed file, sorted by name, and adds it to
# <target>. Contents are embedded as byte arrays at build time, so any bytes are safe.
function(tileplan_embed_files target)
  cmake_parse_arguments(ARG "" "NAMESPACE;FUNCTION" "FILES" ${ARGN})
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${ARG_FUNCTION}_embedded.cc")
  set(abs_files "")
  foreach(f IN LISTS ARG_FILES)
    get_filename_component(abs "${f}" ABSOLUTE)
    list(APPEND abs_files "${abs}")
  endforeach()
  add_custom_command(
    OUTPUT "${out}"
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DNS=${ARG_NAMESPACE} -DFN=${ARG_FUNCTION}
            "-DFILES=${abs_files}" -P "${PROJECT_SOURCE_DIR}/cmake/EmbedFilesScript.cmake"
    DEPENDS ${abs_files} "${PROJECT_SOURCE_DIR}/cmake/EmbedFilesScript.cmake"
    COMMENT "Embedding ${ARG_FUNCTION}"
    VERBATIM)
  target_sources(${target} PRIVATE "${out}")
endfunction()
