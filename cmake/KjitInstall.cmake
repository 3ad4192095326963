# `cmake --install`: libkjit.so.X.Y.Z with its SONAME links, the public headers, a CMake package
# (kjitConfig.cmake + kjitConfigVersion.cmake, target kjit::kjit) and kjit.pc for pkg-config.
# Only the product is installed: kjit_internal, the tests and the bench stay in the build tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KJIT_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kjit" CACHE STRING
    "Where kjitConfig.cmake is installed, relative to the prefix")

install(TARGETS kjit EXPORT kjitTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT runtime NAMELINK_COMPONENT development
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(FILES ${KJIT_PUBLIC_HEADERS} ${KJIT_PUBLIC_CXX_HEADERS}
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/kjit" COMPONENT development)
install(EXPORT kjitTargets NAMESPACE kjit:: DESTINATION "${KJIT_INSTALL_CMAKEDIR}" COMPONENT development)

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/kjitConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/kjitConfig.cmake" INSTALL_DESTINATION "${KJIT_INSTALL_CMAKEDIR}")
# Same major version: 0.y.z accepts any request for 0.x with x <= y (docs/abi-policy.md).
write_basic_package_version_file("${PROJECT_BINARY_DIR}/kjitConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMajorVersion)
install(FILES "${PROJECT_BINARY_DIR}/kjitConfig.cmake" "${PROJECT_BINARY_DIR}/kjitConfigVersion.cmake"
  DESTINATION "${KJIT_INSTALL_CMAKEDIR}" COMPONENT development)

# kjit.pc is relocatable: its prefix is found from where the file lies (${pcfiledir}), so
# `cmake --install build --prefix P` gives a kjit.pc that points at P.
file(RELATIVE_PATH KJIT_PC_PREFIX_FROM_PCFILEDIR "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" KJIT_PC_PREFIX_FROM_PCFILEDIR "${KJIT_PC_PREFIX_FROM_PCFILEDIR}")
configure_file("${PROJECT_SOURCE_DIR}/cmake/kjit.pc.in" "${PROJECT_BINARY_DIR}/kjit.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/kjit.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig" COMPONENT development)
