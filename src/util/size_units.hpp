// Sizes and ages as people write them ("5G", "30d") and read them ("1.5 GiB"). A leaf with no
// dependency but the Error type (status.hpp, header-only here), so that libkjit's objects (the
// size limit of $KJIT_CACHE_MAX_SIZE, log messages) and the `kjit` command, which links only
// libkjit.so, compile the same source: one copy of the rules, no second parser to drift.
#pragma once

#include "util/status.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace kjit::size_units {

// "5G", "512M", "1.5G", "2GiB", "100k", "12345" (bytes): a decimal number (digits, optionally a
// point and more digits), then optionally K, M, G or T (powers of 1024, either case), then
// optionally "B" or "iB". Nothing else: no sign, hexadecimal, exponent or space. Errors:
// invalid_argument saying what is wrong and what is accepted (also for more than 2^64 - 1).
Result<std::uint64_t> parse_size(std::string_view text);
// "30d", "12h", "45m", "90s", "2w" as nanoseconds: a whole number and one unit letter. Errors:
// invalid_argument, also for an age that does not fit in int64 nanoseconds (about 292 years).
Result<std::int64_t> parse_age(std::string_view text);
// "1.5 GiB", for people.
std::string format_size(std::uint64_t bytes);

}  // namespace kjit::size_units
