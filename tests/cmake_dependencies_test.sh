#!/usr/bin/env bash
# A missing build dependency is named with the Debian package that provides it, all of them in
# one message, not as CMake's or pkg-config's raw "could not find" for the first one. Configures
# the project twice in scratch folders, hiding dependencies from CMake
# (CMAKE_DISABLE_FIND_PACKAGE_<name>) and from pkg-config (an empty PKG_CONFIG_LIBDIR): every
# dependency but pkg-config at once, then pkg-config itself.
#   cmake_dependencies_test.sh SOURCE_DIR WORK_DIR CMAKE
set -euo pipefail
src=$1 work=$2 cmake=$3
rm -rf "$work"
mkdir -p "$work/empty-pkgconfig"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# configure NAME ARGS...: a configure that must fail; its output in $work/NAME.log.
configure() {
    local name=$1
    shift
    if env PKG_CONFIG_LIBDIR="$work/empty-pkgconfig" PKG_CONFIG_PATH= "$cmake" -S "$src" -B "$work/$name" "$@" \
        >"$work/$name.log" 2>&1; then
        fail "configure $name succeeded with its dependencies hidden"
    fi
}
expect() {
    # CMake wraps a message's lines: the log is read with its line breaks and indents as blanks.
    tr -s ' \n' ' ' <"$work/$1.log" | grep -qF -- "$2" || fail "configure $1: '$2' not in: $(cat "$work/$1.log")"
}
refuse() {
    if grep -qF -- "$2" "$work/$1.log"; then fail "configure $1 says '$2': $(cat "$work/$1.log")"; fi
}

configure all-missing -DKJIT_BUNDLE_DEPENDENCIES=ON -DKJIT_BUILD_TESTS=ON -DKJIT_BUILD_CLI=ON -DKJIT_BUILD_BENCH=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
for what in "these build dependencies are missing" "the CUDA toolkit with NVRTC" "-DCUDAToolkit_ROOT=DIR" \
    "(Debian: libelf-dev)" "(Debian: libxxhash-dev)" "(Debian: libspdlog-dev libfmt-dev)" "(Debian: libfmt-dev)" \
    "(Debian: libcli11-dev)" "(Debian: nlohmann-json3-dev)" "(Debian: libgtest-dev)" \
    "apt-get install libelf-dev libxxhash-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libgtest-dev" \
    "-DKJIT_BUILD_TESTS=OFF (no tests)"; do
    expect all-missing "$what"
done
refuse all-missing "No package 'libelf' found"
refuse all-missing "Could not find a package configuration file"

configure no-pkg-config -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON
expect no-pkg-config "pkg-config, which finds libelf and xxHash (Debian: pkg-config)"
expect no-pkg-config "apt-get install pkg-config"

[ "$failures" -eq 0 ] && rm -rf "$work"
if [ "$failures" -gt 0 ]; then
    echo "cmake_dependencies_test: $failures failures"
    exit 1
fi
echo "cmake_dependencies_test: all checks passed"
