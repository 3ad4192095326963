#!/usr/bin/env bash
# Shared setup for bench/run.sh and tests/run.sh: installs the Debian packages the build needs
# (only those missing) and configures the build tree, with warnings as errors (-DKJIT_WERROR=ON,
# off in a plain cmake build; an extra -DKJIT_WERROR=OFF given here wins, coming after it).
#
#   bash scripts/setup.sh [extra cmake -D options...]      run it
#   source scripts/setup.sh [extra cmake -D options...]    the same, and the caller also gets
#                                                          KJIT_ROOT and BUILD_DIR (absolute)
#   bash scripts/setup.sh --packages-only                  the packages and the toolkit check,
#                                                          no configure (scripts/build_wheel.sh)
#
# Environment:
#   BUILD_DIR             build tree (default: <repo>/build; a relative path is taken from the repo root)
#   KJIT_EXTRA_PACKAGES   more Debian packages to install when missing (space-separated)
#
# Works from any current directory. Needs root (or sudo) only when a package is missing; the
# CUDA toolkit (NVRTC) is not a Debian package here and must already be installed, normally in
# /usr/local/cuda. Exits (or, when sourced, returns) non-zero if a step fails.

# Debian packages the build needs: compiler and build tools, libelf, spdlog, xxHash, GoogleTest,
# hiredis and zstd (the Redis cluster tier: its client, and its values' compression) and
# redis-server (its tests and the bench's cluster scenario start one on 127.0.0.1, and a Redis
# Cluster with its redis-cli) and openssl (their TLS servers' certificates; libssl3, which libkjit
# opens at run time for rediss://); for the bench and the kjit command, CLI11 (arguments),
# nlohmann-json (--json), gnuplot (the chart) and pyelftools (the lookup it is compared with).
# make is listed on its own because cmake only recommends it, and --no-install-recommends would
# leave CMake's default generator without it.
KJIT_SETUP_PACKAGES=(cmake make g++ pkg-config libelf-dev libspdlog-dev libxxhash-dev libgtest-dev
    libhiredis-dev libzstd-dev redis-server openssl libcli11-dev nlohmann-json3-dev gnuplot-nox python3-pyelftools)
# Callers that need more (tests/run.sh: clang and its libFuzzer runtime) name them here.
# shellcheck disable=SC2206
KJIT_SETUP_PACKAGES+=(${KJIT_EXTRA_PACKAGES:-})

_kjit_setup_say() { printf 'setup: %s\n' "$*"; }
_kjit_setup_fail() { printf 'setup: error: %s\n' "$*" >&2; return 1; }

# True when PKG is installed (not merely known to dpkg, e.g. removed with its config kept).
_kjit_setup_installed() {
    dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed$'
}

_kjit_setup_packages() {
    command -v dpkg >/dev/null 2>&1 || _kjit_setup_fail "dpkg not found: this script expects Debian 12" || return 1
    local missing=() pkg
    for pkg in "${KJIT_SETUP_PACKAGES[@]}"; do
        _kjit_setup_installed "$pkg" || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        _kjit_setup_say "all ${#KJIT_SETUP_PACKAGES[@]} Debian packages are installed"
        return 0
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 ||
            _kjit_setup_fail "missing packages (${missing[*]}) and not root; install them as root" || return 1
        sudo=(sudo)
    fi
    _kjit_setup_say "installing missing Debian packages: ${missing[*]}"
    "${sudo[@]}" apt-get update || _kjit_setup_fail "apt-get update failed" || return 1
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "${missing[@]}" ||
        _kjit_setup_fail "apt-get install ${missing[*]} failed" || return 1
}

_kjit_setup_cuda() {
    # FindCUDAToolkit looks for nvcc on PATH, then CUDA_PATH, then /usr/local/cuda; point it at
    # /usr/local/cuda explicitly when nvcc is not on PATH and nothing else was said.
    if ! command -v nvcc >/dev/null 2>&1 && [ -z "${CUDAToolkit_ROOT:-}" ] && [ -z "${CUDA_PATH:-}" ]; then
        if [ -x /usr/local/cuda/bin/nvcc ]; then
            export CUDAToolkit_ROOT=/usr/local/cuda
        else
            _kjit_setup_fail "no CUDA toolkit found (nvcc not on PATH, no /usr/local/cuda); NVRTC is required" || return 1
        fi
    fi
}

_kjit_setup_configure() {
    _kjit_setup_say "configuring $BUILD_DIR"
    # The project's own builds keep its code free of warnings; the caller's options come last.
    cmake -S "$KJIT_ROOT" -B "$BUILD_DIR" -DKJIT_WERROR=ON "$@" || _kjit_setup_fail "cmake configure failed" || return 1
}

_kjit_setup_main() {
    KJIT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || return 1
    BUILD_DIR="${BUILD_DIR:-build}"
    case "$BUILD_DIR" in
        /*) ;;
        *) BUILD_DIR="$KJIT_ROOT/$BUILD_DIR" ;;
    esac
    export KJIT_ROOT BUILD_DIR
    _kjit_setup_packages || return 1
    _kjit_setup_cuda || return 1
    [ "${1:-}" = --packages-only ] && return 0
    _kjit_setup_configure "$@" || return 1
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    # Sourced: leave the caller's shell options alone; every step checks its own status.
    _kjit_setup_main "$@"
    return $?
fi
set -euo pipefail
_kjit_setup_main "$@"
