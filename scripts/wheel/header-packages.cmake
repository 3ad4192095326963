# The header-only libraries of the manylinux wheels' build (scripts/build_wheel.sh), which
# passes this file as CMAKE_PROJECT_TOP_LEVEL_INCLUDES (CMake 3.24 or newer) beside
# zig-toolchain.cmake: a dependency provider that answers find_package() for fmt, spdlog, CLI11
# and nlohmann_json from the headers scripts/build_wheel.sh copied into
# ${KJIT_WHEEL_PREFIX}/include (Debian 12's, the versions the normal build uses). Debian's own
# package configuration would put /usr/include on the compile line, and with it the build
# machine's glibc 2.36 headers, which must not reach a compile for glibc 2.28 (or for another
# arch). Every other find_package() goes on to CMake's own search.
#
# The targets are those the wheel's build links (KJIT_BUNDLE_DEPENDENCIES, the kjit command):
# fmt::fmt-header-only, CLI11::CLI11 and nlohmann_json::nlohmann_json; spdlog, header-only
# with fmt's (SPDLOG_FMT_EXTERNAL), needs only to be found.
cmake_minimum_required(VERSION 3.24)

if(NOT KJIT_WHEEL_PREFIX OR NOT EXISTS "${KJIT_WHEEL_PREFIX}/include/fmt/core.h")
  message(FATAL_ERROR "header-packages.cmake needs -DKJIT_WHEEL_PREFIX=DIR with the header-only libraries in DIR/include (scripts/build_wheel.sh)")
endif()

# _kjit_wheel_header_version(OUT FILE REGEX...): the version a header states: each REGEX's
# first group from the first line of FILE that matches it, joined with dots.
function(_kjit_wheel_header_version out file)
  set(parts "")
  foreach(regex IN LISTS ARGN)
    file(STRINGS "${KJIT_WHEEL_PREFIX}/include/${file}" line REGEX "${regex}" LIMIT_COUNT 1)
    if(NOT line MATCHES "${regex}")
      message(FATAL_ERROR "header-packages.cmake: no version in ${KJIT_WHEEL_PREFIX}/include/${file}")
    endif()
    list(APPEND parts "${CMAKE_MATCH_1}")
  endforeach()
  list(JOIN parts "." version)
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

# _kjit_wheel_interface(TARGET [DEFINITIONS...]): an imported, header-only target on the prefix.
function(_kjit_wheel_interface target)
  if(NOT TARGET ${target})
    add_library(${target} INTERFACE IMPORTED GLOBAL)
    set_target_properties(${target} PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${KJIT_WHEEL_PREFIX}/include"
      INTERFACE_COMPILE_DEFINITIONS "${ARGN}")
  endif()
endfunction()

# A macro: find_package() reads <name>_FOUND in its caller's scope.
macro(_kjit_wheel_find_package method name)
  set(_kjit_wheel_version "")
  if("${name}" STREQUAL "fmt")
    file(STRINGS "${KJIT_WHEEL_PREFIX}/include/fmt/core.h" _kjit_wheel_line REGEX "^#define FMT_VERSION [0-9]+")
    string(REGEX REPLACE "^#define FMT_VERSION ([0-9]+)$" "\\1" _kjit_wheel_number "${_kjit_wheel_line}")
    math(EXPR _kjit_wheel_major "${_kjit_wheel_number} / 10000")
    math(EXPR _kjit_wheel_minor "${_kjit_wheel_number} / 100 % 100")
    math(EXPR _kjit_wheel_patch "${_kjit_wheel_number} % 100")
    set(_kjit_wheel_version "${_kjit_wheel_major}.${_kjit_wheel_minor}.${_kjit_wheel_patch}")
    _kjit_wheel_interface(fmt::fmt-header-only FMT_HEADER_ONLY=1)
  elseif("${name}" STREQUAL "spdlog")
    _kjit_wheel_header_version(_kjit_wheel_version spdlog/version.h
      "^#define SPDLOG_VER_MAJOR ([0-9]+)" "^#define SPDLOG_VER_MINOR ([0-9]+)" "^#define SPDLOG_VER_PATCH ([0-9]+)")
  elseif("${name}" STREQUAL "CLI11")
    _kjit_wheel_header_version(_kjit_wheel_version CLI/Version.hpp "^#define CLI11_VERSION \"([0-9.]+)\"")
    _kjit_wheel_interface(CLI11::CLI11)
  elseif("${name}" STREQUAL "nlohmann_json")
    _kjit_wheel_header_version(_kjit_wheel_version nlohmann/detail/abi_macros.hpp
      "^#define NLOHMANN_JSON_VERSION_MAJOR ([0-9]+)" "^#define NLOHMANN_JSON_VERSION_MINOR ([0-9]+)"
      "^#define NLOHMANN_JSON_VERSION_PATCH ([0-9]+)")
    _kjit_wheel_interface(nlohmann_json::nlohmann_json)
  endif()
  if(NOT _kjit_wheel_version STREQUAL "")
    # find_package(NAME [VERSION] ...): a version asked for is the least one accepted.
    set(_kjit_wheel_wanted "")
    if(${ARGC} GREATER 2)
      set(_kjit_wheel_wanted "${ARGV2}")
    endif()
    if(_kjit_wheel_wanted MATCHES "^[0-9]+(\\.[0-9]+)*$" AND _kjit_wheel_version VERSION_LESS _kjit_wheel_wanted)
      message(FATAL_ERROR "${name} ${_kjit_wheel_wanted} or newer is needed; ${KJIT_WHEEL_PREFIX}/include has ${_kjit_wheel_version}")
    endif()
    set(${name}_FOUND TRUE)
    set(${name}_VERSION "${_kjit_wheel_version}")
    message(STATUS "${name} ${_kjit_wheel_version}: header-only, from ${KJIT_WHEEL_PREFIX}/include")
  endif()
endmacro()

cmake_language(SET_DEPENDENCY_PROVIDER _kjit_wheel_find_package SUPPORTED_METHODS FIND_PACKAGE)
