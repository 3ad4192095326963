# The build's dependencies, looked up in one place. A missing one is named with what provides
# it (the Debian package), all of them in one message, instead of CMake's raw "Could not find a
# package configuration file provided by spdlog" or pkg-config's "No package 'libelf' found"
# for the first one only. Included by the top-level CMakeLists.txt after the options are set;
# the parts that need a dependency only when built (tests, the kjit command, the bench, a
# bundling build) look it up only then.

set(_kjit_missing "")          # one line per missing dependency
set(_kjit_missing_debian "")   # the Debian packages that provide them
set(_kjit_missing_optional "") # how to build without the parts that need them

# _kjit_missing(WHAT DEBIAN_PACKAGES [HOW_TO_DO_WITHOUT]): records a missing dependency
# (DEBIAN_PACKAGES "": none provides it).
macro(_kjit_missing what debian)
  if("${debian}" STREQUAL "")
    string(APPEND _kjit_missing "\n  ${what}")
  else()
    string(APPEND _kjit_missing "\n  ${what} (Debian: ${debian})")
    separate_arguments(_kjit_packages UNIX_COMMAND "${debian}")
    list(APPEND _kjit_missing_debian ${_kjit_packages})
  endif()
  if(NOT "${ARGN}" STREQUAL "")
    list(APPEND _kjit_missing_optional "${ARGN}")
  endif()
endmacro()

# The CUDA toolkit: NVRTC's library and the headers (cuda.h, nvrtc.h). Not a Debian package in
# the versions libkjit needs: NVIDIA's installer or apt repository puts it in /usr/local/cuda.
find_package(CUDAToolkit)
if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::nvrtc)
  _kjit_missing("the CUDA toolkit with NVRTC, 12.0 or newer: NVIDIA's installer, or the cuda-toolkit package of NVIDIA's apt repository, puts it in /usr/local/cuda; installed elsewhere, configure with -DCUDAToolkit_ROOT=DIR"
    "")
endif()

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(LIBELF QUIET IMPORTED_TARGET libelf)
  if(NOT LIBELF_FOUND)
    _kjit_missing("libelf, elfutils' ELF library (pkg-config: libelf)" libelf-dev)
  endif()
  pkg_check_modules(LIBXXHASH QUIET IMPORTED_TARGET libxxhash)
  if(NOT LIBXXHASH_FOUND)
    _kjit_missing("xxHash (pkg-config: libxxhash)" libxxhash-dev)
  endif()
else()
  _kjit_missing("pkg-config, which finds libelf and xxHash" pkg-config)
endif()

# spdlog's own package config looks for fmt: without fmt, spdlog is not found either.
find_package(spdlog QUIET)
if(NOT spdlog_FOUND)
  _kjit_missing("spdlog, with fmt (spdlogConfig.cmake)" "libspdlog-dev libfmt-dev")
endif()
if(KJIT_BUNDLE_DEPENDENCIES)
  find_package(fmt CONFIG QUIET)
  if(NOT fmt_FOUND)
    _kjit_missing("fmt, header-only for KJIT_BUNDLE_DEPENDENCIES (fmtConfig.cmake)" libfmt-dev
      "-DKJIT_BUNDLE_DEPENDENCIES=OFF (fmt as spdlog's shared library)")
  endif()
endif()

if(KJIT_BUILD_CLI OR KJIT_BUILD_BENCH OR KJIT_BUILD_TESTS)
  find_package(CLI11 2.1 CONFIG QUIET)
  if(NOT CLI11_FOUND)
    _kjit_missing("CLI11 2.1 or newer, for the kjit command, the bench and the stress test" libcli11-dev
      "-DKJIT_BUILD_CLI=OFF -DKJIT_BUILD_BENCH=OFF -DKJIT_BUILD_TESTS=OFF (no kjit command, bench or tests)")
  endif()
endif()
if(KJIT_BUILD_CLI OR KJIT_BUILD_BENCH)
  find_package(nlohmann_json 3.10 CONFIG QUIET)
  if(NOT nlohmann_json_FOUND)
    _kjit_missing("nlohmann-json 3.10 or newer, for the kjit command's and the bench's --json" nlohmann-json3-dev
      "-DKJIT_BUILD_CLI=OFF -DKJIT_BUILD_BENCH=OFF (no kjit command or bench)")
  endif()
endif()
if(KJIT_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    _kjit_missing("GoogleTest, for the tests" libgtest-dev "-DKJIT_BUILD_TESTS=OFF (no tests)")
  endif()
endif()

if(NOT _kjit_missing STREQUAL "")
  set(_kjit_apt "")
  if(_kjit_missing_debian)
    list(REMOVE_DUPLICATES _kjit_missing_debian)
    list(JOIN _kjit_missing_debian " " _kjit_apt)
    set(_kjit_apt "On Debian or Ubuntu, as root: apt-get install ${_kjit_apt}\n")
  endif()
  set(_kjit_without "")
  if(_kjit_missing_optional)
    list(REMOVE_DUPLICATES _kjit_missing_optional)
    list(JOIN _kjit_missing_optional "\n  " _kjit_without)
    set(_kjit_without "\nOr build without what needs them:\n  ${_kjit_without}")
  endif()
  message(FATAL_ERROR "libkjit cannot be built: these build dependencies are missing:${_kjit_missing}\n"
    "${_kjit_apt}(scripts/setup.sh installs every Debian package the project needs, and expects the CUDA "
    "toolkit in /usr/local/cuda.)${_kjit_without}")
endif()
