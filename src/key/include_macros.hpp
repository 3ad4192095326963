// Include macros: just enough of the C preprocessor's macro expansion to follow a computed
// include (`#include MACRO`, `#include CUDA_STD_HEADER(cstdint)`, `__has_include(MACRO)`) to the
// header names it may stand for. The include scanner does not evaluate conditionals, so a macro
// may have several definitions (CUTLASS defines CUDA_STD_HEADER one way or another under
// `#if`); every combination of them is a candidate, and so is each macro left undefined (its
// name then stays as written): a superset of what NVRTC reads, never less. What cannot be told
// from the definitions seen (a reserved name such as `__FOO` that none defines, which NVRTC may
// predefine; `__VA_OPT__`; an expansion past its budget) is reported as not followed, and the
// scanner then falls back to every file under the include folders. Knows nothing else.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::key::include_macros {

// One `#define` (or -D option) of a macro.
struct Definition {
    bool function_like = false;
    std::vector<std::string> params;  // a variadic one last, "__VA_ARGS__" unless GNU-named
    bool variadic = false;
    std::string body;  // the replacement list as written (comments included)
    bool operator<(const Definition &o) const;
};

// Every definition seen, by macro name; each distinct definition once.
class Table {
public:
    // The definition on one logical `#define` line, given the text after `define` (continuation
    // lines already joined); false when it is malformed or already known.
    bool add_directive(std::string_view after_define);
    // A -D option's value: "NAME", "NAME=VALUE", "NAME(a,b)=VALUE" (no value: "1").
    bool add_option(std::string_view def);
    // Null when `name` has no definition.
    const std::vector<Definition> *find(const std::string &name) const;
    std::size_t size() const { return count_; }

private:
    bool add(std::string name, Definition d);
    std::map<std::string, std::vector<Definition>, std::less<>> macros_;
    std::size_t count_ = 0;
};

struct HeaderName {
    std::string name;
    bool quoted = false;  // "name" (else <name>)
    bool operator<(const HeaderName &o) const { return quoted != o.quoted ? quoted < o.quoted : name < o.name; }
    bool operator==(const HeaderName &o) const { return quoted == o.quoted && name == o.name; }
};

struct Expansion {
    bool followed = true;           // false: the operand may name a file these names do not cover
    std::vector<HeaderName> names;  // sorted, distinct
};

// The header names `operand` (the text after `#include`, or inside `__has_include(...)`) may
// expand to under `table`. An expansion that gives no header name is dropped: NVRTC fails on such
// a directive if it reaches it (a macro defined nowhere, say, in an `#if 0` block), so it reads
// no file through it.
Expansion header_names(std::string_view operand, const Table &table);

}  // namespace kjit::key::include_macros
