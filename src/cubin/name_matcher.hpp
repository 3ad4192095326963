// Name matcher: the keyword rule of DESIGN.md, as a validator (does this name belong to that
// keyword?) and as a selector (which of a cubin's function symbols is the kernel?). Pure
// string work: no I/O, no allocation on the validator path, no regex.
#pragma once

#include "util/status.hpp"

#include <string_view>
#include <vector>

namespace kjit::cubin::name_matcher {

// A function symbol offered to the selector.
struct Candidate {
    std::string_view name;
    bool is_entry = false;  // st_other & STO_CUDA_ENTRY: a __global__ kernel
};

// KJIT invalid_argument unless `keyword` is `[A-Za-z0-9_]+`, optionally namespaced as
// `seg::seg::kernel` with each segment of that form.
Status check_keyword(std::string_view keyword);

// Whether `name` can be a kernel name at all: non-empty, with no space, no control byte (below
// 0x20, or 0x7f) and no NUL; bytes from 0x80 up (UTF-8 identifiers) are fine. No compiler
// makes other names, but a crafted cubin can, and a sidecar line (space-separated text ending
// in a newline) could not hold them: a newline would even forge a line for another keyword.
// So they are never candidates, and the sidecar module never writes them.
bool is_plain_name(std::string_view name);

// Rule 1: `name` matches `^_Z\d+<keyword>` (keyword as literal text) or equals `keyword`.
// A namespaced keyword `a::b::k` matches `^_ZN1a1b\d+k`. `keyword` must have passed
// check_keyword. A name that is not is_plain_name() never matches. Costs a pass over the name.
bool matches(std::string_view name, std::string_view keyword);

// Rule 2's last filter: the matched identifier is exactly the keyword's last segment (its
// length digits, read as a number as the demangler reads them, so `_Z04gemm` holds `gemm`,
// equal its length), or the name equals the keyword.
bool is_exact_identifier(std::string_view name, std::string_view keyword);

// The whole rule over a cubin's function symbols. Duplicated names count once. Returns the
// chosen name (a view of one of `candidates`), or not_found / ambiguous with the candidates
// listed in the message.
Result<std::string_view> select(const std::vector<Candidate> &candidates, std::string_view keyword);

}  // namespace kjit::cubin::name_matcher
