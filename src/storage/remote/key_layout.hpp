// Key layout: the names of a cache key's three values on a server, one place for the tier that
// makes them and a backend that recognises them (a full server's room is made only from the
// entries of its own namespace):
//
//   kjit:<format>e<envelope>:<namespace>:<NVRTC M.m>:<arch>:b:{<key>}   the entry (entry.hpp)
//   kjit:<format>e<envelope>:<namespace>:<NVRTC M.m>:<arch>:l:{<key>}   the lease: who compiles it now
//   kjit:<format>e<envelope>:<namespace>:<NVRTC M.m>:<arch>:f:{<key>}   a compile error, shared for 60 s
//
// "{key}" is a hash tag: the three live on one server, in one Redis Cluster slot. The envelope
// version beside the cache format: a node of another version never reads, counts as corrupt or
// replaces a value it cannot decode, and old and new nodes in a fleet being upgraded keep to
// their own keys (0.6-0.8 deleted version 2 values as damaged).
#pragma once

#include "storage/remote/entry.hpp"

#include <string>
#include <string_view>

namespace kjit::storage::remote::key_layout {

// The key of `kind` ('b' entry, 'l' lease, 'f' failure) for `expected` in `name_space`.
inline std::string key_of(const Expected &expected, const std::string &name_space, char kind) {
    // "13.0" of an NVRTC identity "13.0 libnvrtc.so.13.0.88 12345678".
    const std::string nvrtc_release = expected.nvrtc_identity.substr(0, expected.nvrtc_identity.find(' '));
    return "kjit:" + std::to_string(expected.format) + "e" + std::to_string(kEnvelopeVersion) + ":" + name_space + ":" +
           nvrtc_release + ":" + expected.arch + ":" + kind + ":{" + expected.key + "}";
}

// A glob (Redis SCAN MATCH) that matches every entry of `name_space`, and perhaps more:
// is_entry_of() checks what it matched.
inline std::string entries_pattern(const std::string &name_space) { return "kjit:*:" + name_space + ":*:b:*"; }

// Whether `key` is an entry of `name_space`, of any format and envelope.
inline bool is_entry_of(std::string_view key, const std::string &name_space) {
    const auto first = key.find(':');
    const auto second = first == std::string_view::npos ? first : key.find(':', first + 1);
    if (second == std::string_view::npos || key.substr(0, first) != "kjit") return false;
    return key.substr(second + 1, name_space.size() + 1) == name_space + ":" &&
           key.find(":b:{") != std::string_view::npos;
}

}  // namespace kjit::storage::remote::key_layout
