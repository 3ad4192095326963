# The project's warnings for its own code (never for third-party headers, which come in as
# system headers), errors with KJIT_WERROR, and the optional sanitizer build (KJIT_SANITIZE).
#
# KJIT_WERROR is off by default: a user's build (cmake with the defaults, the wheel) must not
# fail because a newer compiler, or another optimisation level, finds something new to warn
# about. The project's own scripts (scripts/setup.sh, for tests/run.sh and bench/run.sh) turn it
# on, and tests/run.sh builds every build type with GCC and clang with it.

function(kjit_project_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wswitch -Wcast-align
    -Wnull-dereference $<$<BOOL:${KJIT_WERROR}>:-Werror>
    $<$<COMPILE_LANGUAGE:CXX>:-Wold-style-cast -Wnon-virtual-dtor>
    $<$<COMPILE_LANGUAGE:C>:-Wstrict-prototypes>)
endfunction()

# Debug information compressed (zlib) in objects, archives and programs: it is 90% of a test
# program's bytes (46 of 50 MB in RelWithDebInfo), each of the ~40 test programs holds the whole
# library's, and the test suite's seven build trees filled a CI machine's disk (11 GB; 2.6x
# less per program compressed). gdb, valgrind, addr2line and the sanitizers' symbolizers read
# compressed sections. Only where both the compiler and the linker take -gz.
include(CheckCXXCompilerFlag)
include(CheckLinkerFlag)
check_cxx_compiler_flag(-gz KJIT_COMPILER_HAS_GZ)
check_linker_flag(CXX -gz KJIT_LINKER_HAS_GZ)
if(KJIT_COMPILER_HAS_GZ AND KJIT_LINKER_HAS_GZ)
  add_compile_options(-gz)
  add_link_options(-gz)
endif()

if(KJIT_SANITIZE)
  add_compile_options(-fsanitize=${KJIT_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${KJIT_SANITIZE})
endif()

# Fuzz builds instrument every object for coverage; only the fuzz targets link libFuzzer's main.
if(KJIT_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KJIT_BUILD_FUZZERS needs clang (-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
