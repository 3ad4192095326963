// Request record: what a run asks for, written down so that a later step can compile it ahead of
// time (`kjit warm`, docs/serving.md). Every distinct request a process makes through
// kjit_compile, kjit_compile_named, kjit_compile_and_load or kjit_compile_batch, hit or miss, is
// appended once to a record file as one JSON line (format: docs/serving.md, "The record"):
//
//   {"kjit_request":1,"id":"<16 hex>","source":...,"keyword":...,"name_expression":...,"arch":...,
//    "program_name":...,"nvrtc_options":[...],"include_paths":[...],"headers":[[name,text],...],
//    "link_inputs":[...],"link_options":[...]}
//
// `id` is the XXH3-64 of the line after it: two processes that make the same request write the
// same line. Many threads and processes may record into one file: each line is written whole by
// one write() under an exclusive flock of the file, after reading what other processes appended
// since, so no line is torn, interleaved or written twice. Paths (include folders, link inputs)
// are written absolute. Compiled into libkjit.so only, beside the C ABI (c_api_*.cpp).
#pragma once

#include "key/cache_key.hpp"
#include "util/status.hpp"

#include <string>

namespace kjit::api::request_record {

// Starts recording into `path` (appended to; created 0644 when missing), in place of any
// recording under way; from then on $KJIT_RECORD is not read. Errors: invalid_argument (empty),
// io naming the file. Thread safe.
Status start(const std::string &path);
// Stops recording (nothing to flush: each line was written whole). Thread safe.
void stop();
// Whether this process records: a recording started, else $KJIT_RECORD set (read once, at the
// first call). The hit memo does not answer while it does (a memo hit would not be recorded).
bool active();
// Records `request` (as request_from settled it) when this process records and has not recorded
// it yet. Never fails the call: a record that cannot be written is said once on stderr, and the
// recording stops. Thread safe; fork safe (a child reopens the file at its first record).
void note(const key::Request &request);

}  // namespace kjit::api::request_record
