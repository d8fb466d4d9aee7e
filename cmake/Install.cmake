# `cmake --install` (docs/embedding.md, "Installing"): the C API header, every library of the
# source tree as a static archive (tileplan_c and all it links), the plan's .proto files, and
# a CMake package (find_package(tileplan CONFIG)) whose tileplan::tileplan_c target brings
# the rest, the dependencies found through find_dependency.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The static libraries defined under `dir`, tests/ excluded, into `out`.
function(tileplan_collect_libraries dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  set(found)
  foreach(t ${targets})
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "STATIC_LIBRARY")
      list(APPEND found ${t})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    file(RELATIVE_PATH relative ${PROJECT_SOURCE_DIR} ${sub})
    if(NOT relative MATCHES "^tests(/|$)")
      tileplan_collect_libraries(${sub} more)
      list(APPEND found ${more})
    endif()
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

tileplan_collect_libraries(${PROJECT_SOURCE_DIR} tileplan_libraries)
install(TARGETS ${tileplan_libraries} EXPORT tileplanTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}/tileplan)
install(FILES include/tileplan/tileplan.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tileplan)
foreach(proto planner/plan.proto regions/ir.proto kernels/core/tactic.proto targets/target.proto)
  get_filename_component(proto_dir ${proto} DIRECTORY)
  install(FILES ${proto} DESTINATION ${CMAKE_INSTALL_DATADIR}/tileplan/proto/${proto_dir})
endforeach()
install(EXPORT tileplanTargets NAMESPACE tileplan::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tileplan)
configure_package_config_file(cmake/tileplanConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/tileplanConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tileplan)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tileplanConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tileplanConfig.cmake
              ${PROJECT_BINARY_DIR}/tileplanConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tileplan)
