# The CMake toolchain of the manylinux wheels (scripts/build_wheel.sh; docs/python.md, "The
# wheel"): C and C++ compiled and linked by zig (PyPI's ziglang, in the build venv) for
# <arch>-linux-gnu with glibc 2.28 symbols, and zig's libc++, libc++abi and libunwind linked
# statically. scripts/build_wheel.sh passes it with two cache variables:
#
#   KJIT_WHEEL_PREFIX  the folder it made for one arch: bin/ (its cc, c++, ar and ranlib
#                      wrappers, which call zig with the target), include/ and lib/ (the
#                      libraries it built from Debian's sources with them, and the header-only
#                      ones), lib/pkgconfig/ (their .pc files)
#   KJIT_WHEEL_ARCH    x86_64 or aarch64
#
# Always a cross build, also for x86_64: nothing of the build machine's /usr (its glibc 2.36
# headers and libraries) may reach the compiler or the linker. pkg-config reads only the
# prefix's .pc files; header-packages.cmake beside this file answers find_package() for the
# header-only libraries.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES KJIT_WHEEL_PREFIX KJIT_WHEEL_ARCH)
if(NOT KJIT_WHEEL_PREFIX OR NOT KJIT_WHEEL_ARCH)
  message(FATAL_ERROR "zig-toolchain.cmake needs -DKJIT_WHEEL_PREFIX=DIR and -DKJIT_WHEEL_ARCH=x86_64|aarch64 (scripts/build_wheel.sh passes both)")
endif()
if(NOT EXISTS "${KJIT_WHEEL_PREFIX}/bin/c++")
  message(FATAL_ERROR "zig-toolchain.cmake: no ${KJIT_WHEEL_PREFIX}/bin/c++ (scripts/build_wheel.sh writes it)")
endif()

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR "${KJIT_WHEEL_ARCH}")
set(CMAKE_C_COMPILER "${KJIT_WHEEL_PREFIX}/bin/cc")
set(CMAKE_CXX_COMPILER "${KJIT_WHEEL_PREFIX}/bin/c++")
# zig's archiver: the build machine's GNU ar cannot index another arch's objects.
set(CMAKE_AR "${KJIT_WHEEL_PREFIX}/bin/ar" CACHE FILEPATH "zig ar" FORCE)
set(CMAKE_RANLIB "${KJIT_WHEEL_PREFIX}/bin/ranlib" CACHE FILEPATH "zig ranlib" FORCE)
# Stripped when linked (lld's --strip-all): the build machine's strip cannot read an aarch64
# file, so scripts/build_wheel.sh turns the install's strip off (install.strip=false).
set(CMAKE_EXE_LINKER_FLAGS_INIT "-s")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-s")

# The glibc functions above 2.28 that libkjit calls, and glibc's string functions rather than
# zig compiler_rt's, in each binary (glibc_compat.c beside this file).
set(CMAKE_C_STANDARD_LIBRARIES_INIT "${KJIT_WHEEL_PREFIX}/lib/libkjit_glibc_compat.a")
set(CMAKE_CXX_STANDARD_LIBRARIES_INIT "${KJIT_WHEEL_PREFIX}/lib/libkjit_glibc_compat.a")

# Libraries and headers come from the prefix (pkg-config, header-packages.cmake), programs
# (pkg-config, nvcc for FindCUDAToolkit's version) from the build machine. The CUDA toolkit
# gives headers only: libkjit dlopens NVRTC and the driver at run time.
set(ENV{PKG_CONFIG_LIBDIR} "${KJIT_WHEEL_PREFIX}/lib/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
unset(ENV{PKG_CONFIG_SYSROOT_DIR})
