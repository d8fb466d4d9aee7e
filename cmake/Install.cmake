# `cmake --install` (docs/embedding.md, "Installing"): the C API header; the shared library
# libtileplan.so (tileplan::tileplan); every library of the source tree as a static archive
# (tileplan::tileplan_static and all it links); the plan's .proto files; a CMake package
# (find_package(tileplan CONFIG)) whose static target brings its dependencies through
# find_dependency; and tileplan.pc for pkg-config (the shared library).
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
install(TARGETS ${tileplan_libraries} EXPORT tileplanStaticTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}/tileplan)
install(TARGETS tileplan_shared EXPORT tileplanTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Relocatable: the prefix is found from the .pc file's own place (whatever --prefix says).
file(RELATIVE_PATH tileplan_pc_up /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(cmake/tileplan.pc.in ${PROJECT_BINARY_DIR}/tileplan.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tileplan.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES include/tileplan/tileplan.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tileplan)
foreach(proto planner/plan.proto regions/ir.proto kernels/core/tactic.proto targets/target.proto)
  get_filename_component(proto_dir ${proto} DIRECTORY)
  install(FILES ${proto} DESTINATION ${CMAKE_INSTALL_DATADIR}/tileplan/proto/${proto_dir})
endforeach()
# Two export sets: the shared library alone (needs nothing else), and the static archives
# with their dependencies (loaded for COMPONENTS static).
install(EXPORT tileplanTargets NAMESPACE tileplan::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tileplan)
install(EXPORT tileplanStaticTargets NAMESPACE tileplan::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tileplan)
configure_package_config_file(cmake/tileplanConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/tileplanConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tileplan)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tileplanConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tileplanConfig.cmake
              ${PROJECT_BINARY_DIR}/tileplanConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tileplan)
