#!/usr/bin/env bash
# libkjit.so must export only kjit_* functions (plus the KJIT_1 version node), exactly the list
# committed in abi/libkjit.symbols (name@version node, sorted), carry its SONAME, and need neither
# libcuda nor libnvrtc (DT_NEEDED).
# Usage: check_exports.sh LIBKJIT_SO SOURCE_DIR
set -euo pipefail
lib=$1 src=$2
bad=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | grep -v -E '^(kjit_[a-z_]+|KJIT_[0-9.]+)$' || true)
if [ -n "$bad" ]; then
  echo "FAIL: $lib exports symbols outside kjit_*:"; echo "$bad" | head -20; exit 1
fi
count=$(nm -D --defined-only "$lib" | grep -c ' T kjit_' || true)
[ "$count" -ge 1 ] || { echo "FAIL: no kjit_* functions exported"; exit 1; }
unversioned=$(objdump -T "$lib" | awk '/ kjit_/ && $(NF-1) !~ /^KJIT_/' || true)
[ -z "$unversioned" ] || { echo "FAIL: kjit_* symbols without a KJIT_ version node:"; echo "$unversioned"; exit 1; }
exported=$(objdump -T "$lib" | awk '$NF ~ /^kjit_/ {print $NF "@" $(NF-1)}' | sort)
if ! diff -u "$src/abi/libkjit.symbols" <(printf '%s\n' "$exported") > /dev/null; then
  echo "FAIL: the exported symbols differ from abi/libkjit.symbols (- committed, + built):"
  diff -u "$src/abi/libkjit.symbols" <(printf '%s\n' "$exported") | tail -n +3
  echo "A new function goes in a new version node (docs/abi-policy.md); then add it to abi/libkjit.symbols."
  exit 1
fi
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
case "$soname" in libkjit.so.[0-9]*) ;; *) echo "FAIL: SONAME is '$soname'"; exit 1 ;; esac
# Both are dlopened when first needed (src/load/driver.cpp, src/compile/nvrtc_library.cpp), so that libkjit
# loads, resolves and loads shipped caches where neither is installed.
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*Shared library: \[\(.*\)\]/\1/p')
[ -n "$needed" ] || { echo "FAIL: readelf lists no NEEDED entry for $lib"; exit 1; }
if printf '%s\n' "$needed" | grep -q '^libcuda'; then echo "FAIL: $lib links libcuda"; exit 1; fi
if printf '%s\n' "$needed" | grep -q '^libnvrtc'; then echo "FAIL: $lib links NVRTC"; exit 1; fi
echo "OK: $count kjit_* functions exported, all in KJIT_ nodes, SONAME $soname, no libcuda or libnvrtc"
