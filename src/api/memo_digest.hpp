// The hit memo's digest of a kjit_compile / kjit_compile_named call, taken from the caller's
// arguments as they are: a repeat is answered (cache::Cache::recall_with) without building a
// key::Request, copying its strings or reading settings that cannot change the answer. Which
// fields it holds: compile_options::kFields (keyed and digest_only), checked against
// HitMemo::digest of compile_options::request_from's request by tests/api/compile_options_test.cpp.
#pragma once

#include "cache/hit_memo.hpp"
#include "kjit/kjit.h"

namespace kjit::api {

// Into `out`: HitMemo::digest of the Request the C ABI would build from these arguments (the
// same fields in the same order, through HitMemo::Fields), with the defaults of the cache
// folder, the arch and the base folders ($KJIT_BASE_DIRS) resolved as request_from resolves
// them. False where the memo is off ($KJIT_HIT_MEMO=0, as HitMemo::enabled) or the call is not
// one it may answer as it is: a NULL string or list, an empty base folder name, a struct_size
// out of range, a default that cannot be resolved, or a setting in the environment the full
// path would refuse ($KJIT_COMPILE_WAIT, $KJIT_CACHE_MAX_SIZE): the full path then reports
// what is wrong.
bool memo_digest_of(const char *source, const char *keyword, const kjit_compile_options *options,
                    cache::HitMemo::Digest &out);

}  // namespace kjit::api
