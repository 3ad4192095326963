// C structs: the rules every versioned struct of the C ABI is read by (kjit.h: a caller sets
// struct_size to the sizeof of the struct its header has; fields are only ever appended), shared
// by the files that read one (c_api_*.cpp, compile_options.cpp, memo_digest.cpp).
#pragma once

#include "util/status.hpp"

#include <cstddef>
#include <string>

// Whether a caller's versioned struct (of its own struct_size) holds `field`.
#define KJIT_FIELD_PRESENT(type, ptr, field) ((ptr)->struct_size >= offsetof(type, field) + sizeof((ptr)->field))

namespace kjit::api::c_struct {

inline Error invalid(std::string message) { return Error{Errc::invalid_argument, std::move(message)}; }

// A caller's versioned struct must be at least `min_size` (what the first release had) and at
// most this library's sizeof(T): a larger one is from a newer header and is never half-read.
// `where` names it in the message, e.g. "kjit_compile: options".
template <typename T>
Status check_size(const T &given, const std::string &where, const char *type, std::size_t min_size = sizeof(size_t)) {
    if (given.struct_size >= min_size && given.struct_size <= sizeof(T)) return Ok{};
    return invalid(where + "->struct_size is " + std::to_string(given.struct_size) + "; set it to sizeof(" + type +
                   ") (" + std::to_string(sizeof(T)) + " in this libkjit, or smaller from an older header)");
}

}  // namespace kjit::api::c_struct
