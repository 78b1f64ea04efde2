# packaging/cmake/install.cmake: what `cmake --install` puts where, and the
# files that let other projects find the installed library:
#   <libdir>/libshmsem.so.X.Y.Z, .so.X and the .so link
#   <includedir>/shmsem/*.hpp, *.h     the public headers (C++ and C), nothing else
#   <libdir>/cmake/shmsem/             shmsemConfig.cmake, its version file, the exported targets
#   <libdir>/pkgconfig/shmsem.pc
#   <datadir>/doc/shmsem/LICENSE       the MIT license the files are released under
# Included by the top-level CMakeLists.txt when SHMSEM_INSTALL is on (the
# default only when shmsem is the top-level project, so a vendoring
# add_subdirectory() installs nothing of ours).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SHMSEM_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/shmsem CACHE STRING
    "Where shmsemConfig.cmake is installed, relative to the prefix")
set(SHMSEM_PKGCONFIG_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig CACHE STRING
    "Where shmsem.pc is installed, relative to the prefix")

# Components let a packager split runtime from development files; the
# Debian packaging uses dh_install lists instead, which come to the same.
install(TARGETS shmsem EXPORT shmsemTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT shmsem_runtime NAMELINK_COMPONENT shmsem_development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT shmsem_development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT shmsem_runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Only include/shmsem/ is public (shmsem.h is the C ABI). The private
# headers under src/ (the segment layout, the platform layer) are never
# installed.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/shmsem
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT shmsem_development
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")

install(EXPORT shmsemTargets
  NAMESPACE shmsem::
  FILE shmsemTargets.cmake
  DESTINATION ${SHMSEM_CMAKE_INSTALL_DIR}
  COMPONENT shmsem_development)

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/shmsemConfig.cmake.in
  ${PROJECT_BINARY_DIR}/packaging/shmsemConfig.cmake
  INSTALL_DESTINATION ${SHMSEM_CMAKE_INSTALL_DIR})
# 0.x releases: SameMajorVersion treats 0.1 and 0.2 as compatible, which
# matches the SONAME (libshmsem.so.0 for every 0.x).
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/packaging/shmsemConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/packaging/shmsemConfig.cmake
  ${PROJECT_BINARY_DIR}/packaging/shmsemConfigVersion.cmake
  DESTINATION ${SHMSEM_CMAKE_INSTALL_DIR}
  COMPONENT shmsem_development)

# shmsem.pc. The prefix is the one in force at install time, not at
# configure time, so `cmake --install build --prefix /somewhere` writes a
# .pc that points into /somewhere. Directories given as absolute paths are
# kept as they are.
function(_shmsem_pc_dir out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "\${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()
_shmsem_pc_dir(SHMSEM_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
_shmsem_pc_dir(SHMSEM_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
# Every @VAR@ but @SHMSEM_PC_PREFIX@ is filled in now; the prefix is filled
# in by the install step below.
set(SHMSEM_PC_PREFIX "@SHMSEM_PC_PREFIX@")
configure_file(${PROJECT_SOURCE_DIR}/packaging/pkgconfig/shmsem.pc.in
  ${PROJECT_BINARY_DIR}/packaging/shmsem.pc.in @ONLY)
unset(SHMSEM_PC_PREFIX)
install(CODE "
  set(SHMSEM_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${PROJECT_BINARY_DIR}/packaging/shmsem.pc.in\"
                 \"${PROJECT_BINARY_DIR}/packaging/install-time/shmsem.pc\" @ONLY)
  " COMPONENT shmsem_development)
install(FILES ${PROJECT_BINARY_DIR}/packaging/install-time/shmsem.pc
  DESTINATION ${SHMSEM_PKGCONFIG_INSTALL_DIR}
  COMPONENT shmsem_development)

# The license travels with the binaries. (The Debian packages carry it as
# /usr/share/doc/<package>/copyright instead; see debian/not-installed.)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE
  DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT shmsem_runtime)
