#include "util/size_units.hpp"

#include <cctype>
#include <cstdio>
#include <limits>

namespace kjit::size_units {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The digits from `i` as a whole number (`overflow` set when it does not fit in 64 bits); `i`
// then points past them.
std::uint64_t read_whole(const std::string &s, std::size_t &i, bool &overflow) {
    std::uint64_t whole = 0;
    for (; i < s.size() && is_digit(s[i]); ++i) {
        overflow = overflow || __builtin_mul_overflow(whole, 10u, &whole) ||
                   __builtin_add_overflow(whole, static_cast<std::uint64_t>(s[i] - '0'), &whole);
    }
    return whole;
}

// Decimals as fraction / denominator.
struct Fraction {
    std::uint64_t fraction = 0;
    std::uint64_t denominator = 1;
};

// The decimals after a point at `i`, if there is one; `i` then points past them. False when
// the point has no digit after it.
bool read_fraction(const std::string &s, std::size_t &i, Fraction &f) {
    if (i >= s.size() || s[i] != '.') return true;
    const std::size_t first = ++i;
    for (; i < s.size() && is_digit(s[i]); ++i) {
        // Up to 18 decimals count (the rest cannot change a size below 2^64 by a whole byte).
        if (i - first < 18) {
            f.fraction = f.fraction * 10 + static_cast<std::uint64_t>(s[i] - '0');
            f.denominator *= 10;
        }
    }
    return i != first;
}

// An exponent ("1e9", "1E+3") at `i`, which is refused rather than read as a unit.
bool exponent_at(const std::string &s, std::size_t i) {
    return i < s.size() && (s[i] == 'e' || s[i] == 'E') && i + 1 < s.size() &&
           (is_digit(s[i + 1]) || s[i + 1] == '+' || s[i + 1] == '-');
}

// The bytes a unit stands for: K, M, G or T (either case) are powers of 1024, optionally
// followed by B or iB; B or nothing is 1. False when the unit is none of these.
bool unit_scale(std::string unit, std::uint64_t &scale) {
    for (char &c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    scale = 1;
    if (!unit.empty() && std::string_view("KMGT").find(unit[0]) != std::string_view::npos) {
        scale = std::uint64_t{1} << (10 * (std::string_view("KMGT").find(unit[0]) + 1));
        unit.erase(0, 1);
        if (unit == "IB") unit = "B";
    }
    return unit.empty() || unit == "B";
}

// (whole + fraction) * scale in bytes, rounded down. False when it does not fit in 64 bits.
bool total_bytes(std::uint64_t whole, bool overflow, const Fraction &f, std::uint64_t scale, std::uint64_t &bytes) {
    __extension__ typedef unsigned __int128 Wide;  // fraction (< 10^18) times scale (<= 2^40)
    const Wide part = static_cast<Wide>(f.fraction) * scale / f.denominator;
    return !(overflow || __builtin_mul_overflow(whole, scale, &bytes) ||
             __builtin_add_overflow(bytes, static_cast<std::uint64_t>(part), &bytes));
}

}  // namespace

Result<std::uint64_t> parse_size(std::string_view text) {
    const std::string s(text);
    // The text first, as given (quoted when empty or with a blank), then what a size is, then
    // what is wrong with this one.
    const bool quote = s.empty() || s.find_first_of(" \t") != std::string::npos;
    auto bad = [&](const std::string &why) {
        return Error{Errc::invalid_argument, (quote ? "'" + s + "'" : s) +
                                                 ": expected a size such as 500M or 5G (K, M, G, T): " + why +
                                                 "; the units are powers of 1024 and may end in B or iB (5GiB), a "
                                                 "number may have decimals (1.5G), and one without a unit is bytes"};
    };
    if (s.empty()) return bad("it is empty");
    if (s[0] == '-') return bad("it is negative");
    std::size_t i = 0;
    bool overflow = false;
    const std::uint64_t whole = read_whole(s, i, overflow);
    if (i == 0) return bad("it does not start with a digit");
    // "0x10" is hexadecimal; "5X" is a 5 with an unknown unit.
    if (whole == 0 && i == 1 && i < s.size() && (s[i] == 'x' || s[i] == 'X')) return bad("hexadecimal is not accepted");
    Fraction fraction;
    if (!read_fraction(s, i, fraction)) return bad("no digit after the decimal point");
    if (exponent_at(s, i)) return bad("an exponent is not accepted");
    const std::string given_unit = s.substr(i);
    std::uint64_t scale = 1;
    if (!unit_scale(given_unit, scale)) return bad("unknown unit '" + given_unit + "'");
    std::uint64_t bytes = 0;
    if (!total_bytes(whole, overflow, fraction, scale, bytes)) {
        return bad("it is too large: at most 18446744073709551615 bytes, just under 16 EiB");
    }
    return bytes;
}

Result<std::int64_t> parse_age(std::string_view text) {
    const std::string s(text);
    constexpr std::int64_t kMaxSeconds = std::numeric_limits<std::int64_t>::max() / 1'000'000'000;
    auto bad = [&](const std::string &why) {
        return Error{Errc::invalid_argument, "age '" + s + "' is not an age (" + why +
                                                 "): use a whole number with s, m, h, d or w, e.g. 30d or 12h"};
    };
    std::size_t digits = 0;
    while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
    if (digits == 0) return bad("it does not start with a digit");
    if (digits + 1 != s.size()) return bad(digits == s.size() ? "it has no unit" : "its unit is not one letter");
    std::int64_t unit_s = 0;
    switch (s.back()) {
        case 's': unit_s = 1; break;
        case 'm': unit_s = 60; break;
        case 'h': unit_s = 3600; break;
        case 'd': unit_s = 86400; break;
        case 'w': unit_s = 7 * 86400; break;
        default: return bad("unknown unit '" + s.substr(digits) + "'");
    }
    // Nanoseconds in an int64: under 292 years. 20000w wrapped around to a negative age, which
    // made `prune --older-than` remove every entry.
    std::int64_t n = 0;
    bool overflow = false;
    for (std::size_t i = 0; i < digits; ++i) {
        overflow = overflow || __builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, s[i] - '0', &n);
    }
    if (overflow || n > kMaxSeconds / unit_s) {
        return bad("it is too large: at most " + std::to_string(kMaxSeconds / unit_s) + s.substr(digits) +
                   ", about 292 years");
    }
    return n * unit_s * 1'000'000'000;
}

std::string format_size(std::uint64_t bytes) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    if (u == 0) {
        std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    } else {
        std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    }
    return buf;
}

}  // namespace kjit::size_units
