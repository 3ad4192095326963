#!/usr/bin/env bash
# cibuildwheel's before-all step (pyproject.toml, [tool.cibuildwheel]): in the manylinux_2_28
# image (AlmaLinux 8, as root, with network), installs what scripts/setup.sh installs on
# Debian 12: the CUDA toolkit's NVRTC and headers from NVIDIA's RHEL 8 repository, libelf and
# zlib from AlmaLinux, and the libraries Debian packages but AlmaLinux 8 does not (or too old),
# built from their release archives at Debian 12's versions into /usr/local.
# UNTESTED: this project's machines have no container runtime; see docs/python.md.
set -euo pipefail

cuda_major=13 cuda_minor=0
dnf install -y dnf-plugins-core
dnf config-manager --add-repo \
    "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo"
# nvcc only for CMake's FindCUDAToolkit (it reads the version there); libkjit needs nvrtc.h,
# cuda.h and libnvrtc.so.
dnf install -y "cuda-nvrtc-devel-$cuda_major-$cuda_minor" "cuda-driver-devel-$cuda_major-$cuda_minor" \
    "cuda-cudart-devel-$cuda_major-$cuda_minor" "cuda-nvcc-$cuda_major-$cuda_minor" \
    elfutils-libelf-devel zlib-devel pkgconf-pkg-config make
ln -sfn "/usr/local/cuda-$cuda_major.$cuda_minor" /usr/local/cuda

src=$(mktemp -d)
fetch() { # fetch NAME URL: unpacks the archive into $src/NAME
    mkdir -p "$src/$1"
    curl -fsSL "$2" | tar -xz -C "$src/$1" --strip-components=1
}
cmake_install() { # cmake_install NAME [CMake options...]
    local name=$1
    shift
    cmake -S "$src/$name" -B "$src/$name/build" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_POSITION_INDEPENDENT_CODE=ON "$@"
    cmake --build "$src/$name/build" -j"$(nproc)"
    cmake --install "$src/$name/build"
}

fetch fmt https://github.com/fmtlib/fmt/archive/refs/tags/9.1.0.tar.gz
cmake_install fmt -DFMT_TEST=OFF -DFMT_DOC=OFF
fetch spdlog https://github.com/gabime/spdlog/archive/refs/tags/v1.10.0.tar.gz
cmake_install spdlog -DSPDLOG_FMT_EXTERNAL=ON -DSPDLOG_BUILD_EXAMPLE=OFF
fetch cli11 https://github.com/CLIUtils/CLI11/archive/refs/tags/v2.1.2.tar.gz
cmake_install cli11 -DCLI11_BUILD_TESTS=OFF -DCLI11_BUILD_EXAMPLES=OFF -DCLI11_BUILD_DOCS=OFF
fetch json https://github.com/nlohmann/json/archive/refs/tags/v3.11.2.tar.gz
cmake_install json -DJSON_BuildTests=OFF
fetch xxhash https://github.com/Cyan4973/xxHash/archive/refs/tags/v0.8.1.tar.gz
make -C "$src/xxhash" -j"$(nproc)" install PREFIX=/usr/local
fetch hiredis https://github.com/redis/hiredis/archive/refs/tags/v0.14.1.tar.gz
make -C "$src/hiredis" -j"$(nproc)" install PREFIX=/usr/local
# zstd's library (lib/: no command line tool), at Debian 12's version (AlmaLinux 8 has 1.4.4).
fetch zstd https://github.com/facebook/zstd/archive/refs/tags/v1.5.4.tar.gz
make -C "$src/zstd/lib" -j"$(nproc)" install PREFIX=/usr/local
ldconfig
rm -rf "$src"
