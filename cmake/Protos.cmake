# tileplan_protos(<target> PROTOS <file.proto>...)
#
# Compiles .proto files (paths relative to the current source dir) with protoc, naming them
# relative to the project root, so generated headers are included as "planner/x.pb.h" and
# protos import each other as "regions/ir.proto". Adds the sources to <target>.
function(tileplan_protos target)
  cmake_parse_arguments(ARG "" "" "PROTOS" ${ARGN})
  foreach(proto IN LISTS ARG_PROTOS)
    get_filename_component(abs "${proto}" ABSOLUTE)
    file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${abs}")
    string(REGEX REPLACE "\\.proto$" "" stem "${rel}")
    set(out_cc "${PROJECT_BINARY_DIR}/${stem}.pb.cc")
    set(out_h "${PROJECT_BINARY_DIR}/${stem}.pb.h")
    add_custom_command(
      OUTPUT "${out_cc}" "${out_h}"
      COMMAND protobuf::protoc --cpp_out=${PROJECT_BINARY_DIR} -I ${PROJECT_SOURCE_DIR} "${abs}"
      DEPENDS "${abs}" protobuf::protoc
      COMMENT "protoc ${rel}"
      VERBATIM)
    target_sources(${target} PRIVATE "${out_cc}" "${out_h}")
  endforeach()
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf)
endfunction()
