#!/usr/bin/env bash
# The cluster tier's seam names no client library (ctest: remote_seam, label `lint`): what the
# tier and its backend interface include, followed through every project header they reach
# (src/storage/remote/tier.hpp, backend.hpp), includes no hiredis header, names no hiredis type
# (redisReply, redisContext) and reaches none of the Redis backend's own headers; and the two
# headers compile with a hiredis/hiredis.h that refuses to be included first on the path. The
# same walk from src/storage/remote/redis_backend.cpp must find hiredis (a control: the walk works).
#
#   check_remote_seam.sh SOURCE_DIR CXX
set -uo pipefail
src=$(cd "${1:?usage: check_remote_seam.sh SOURCE_DIR CXX}" && pwd -P)
cxx=${2:?usage: check_remote_seam.sh SOURCE_DIR CXX}
cd "$src/src" || exit 1

# closure FILE...: every project file the given files reach through #include "...", themselves included.
closure() {
    local -A seen=()
    local queue=("$@") file inc
    while [ ${#queue[@]} -gt 0 ]; do
        file=${queue[0]}
        queue=("${queue[@]:1}")
        [ -n "${seen[$file]:-}" ] && continue
        seen[$file]=1
        while IFS= read -r inc; do
            [ -f "$inc" ] && queue+=("$inc")
        done < <(sed -n 's/^ *# *include "\([^"]*\)".*/\1/p' "$file")
    done
    printf '%s\n' "${!seen[@]}" | sort
}

# offenders FILE...: the lines of their closure that reach hiredis or the Redis backend's headers.
offenders() {
    closure "$@" | while IFS= read -r f; do
        grep -nHE '#include *<hiredis/|\bredis(Reply|Context)\b|#include "storage/remote/(redis_client|cluster_router|tls_session)\.hpp"' "$f" |
            grep -vE '^[^:]+:[0-9]+: *//'
    done
}

failed=0
found=$(offenders storage/remote/tier.hpp storage/remote/backend.hpp)
if [ -n "$found" ]; then
    echo "FAIL: the tier's seam reaches a client library (keep it behind storage/remote/backend.hpp, in a backend's .cpp):"
    printf '  %s\n' "$found"
    failed=1
fi
if [ -z "$(offenders storage/remote/redis_backend.cpp)" ]; then
    echo "FAIL: the control found no hiredis reached from remote/redis_backend.cpp: the walk is broken"
    failed=1
fi

poison=$(mktemp -d)
trap 'rm -rf "$poison"' EXIT
mkdir -p "$poison/hiredis"
echo '#error "the tier seam must compile without hiredis"' > "$poison/hiredis/hiredis.h"
printf '#include "storage/remote/tier.hpp"\n#include "storage/remote/backend.hpp"\n#include "storage/remote/key_layout.hpp"\n' > "$poison/seam.cpp"
if ! "$cxx" -std=c++17 -fsyntax-only -I "$poison" -I "$src/src" "$poison/seam.cpp"; then
    echo "FAIL: storage/remote/tier.hpp and backend.hpp do not compile with hiredis refused"
    failed=1
fi
[ "$failed" = 0 ] && echo "remote seam: tier.hpp and backend.hpp reach no hiredis ($(closure storage/remote/tier.hpp storage/remote/backend.hpp | wc -l) headers walked)"
exit "$failed"
