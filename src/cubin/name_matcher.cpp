#include "cubin/name_matcher.hpp"

#include <algorithm>
#include <string>

namespace kjit::cubin::name_matcher {

namespace {

constexpr std::size_t kMaxKeywordLength = 4096;

bool is_ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool starts_with(std::string_view s, std::string_view prefix) {
    return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

std::size_t digit_run(std::string_view s) {
    std::size_t n = 0;
    while (n < s.size() && is_digit(s[n])) ++n;
    return n;
}

// Matches `\d+<ident>` at the start of `s` the way a backtracking regex does: some non-empty
// prefix of the leading digit run is followed by `ident`.
bool matches_digits_then(std::string_view s, std::string_view ident) {
    const std::size_t run = digit_run(s);
    for (std::size_t i = run; i >= 1; --i) {
        if (starts_with(s.substr(i), ident)) return true;
    }
    return false;
}

// Consumes `<decimal length of seg><seg>` (as C++ mangling writes a namespace) from `s`,
// with the length as the regex of rule 1 writes it (no leading zeros).
bool consume_source_name(std::string_view &s, std::string_view seg) {
    char digits[24];
    std::size_t len = seg.size(), n = 0;
    do {
        digits[n++] = static_cast<char>('0' + len % 10);
        len /= 10;
    } while (len != 0);
    std::reverse(digits, digits + n);
    if (!starts_with(s, std::string_view(digits, n))) return false;
    s.remove_prefix(n);
    if (!starts_with(s, seg)) return false;
    s.remove_prefix(seg.size());
    return true;
}

// Whether `s` starts with an Itanium <source-name> holding exactly `ident`: the whole digit
// run read as a number, as the demangler reads it (leading zeros allowed: `04gemm` is `gemm`,
// as c++filt says), then `ident`. The run is the whole length because an identifier never
// starts with a digit; a keyword segment that does (not a C++ identifier) is compared as rule
// 1's regex writes the length.
bool starts_with_source_name(std::string_view s, std::string_view ident) {
    if (ident.empty() || is_digit(ident.front())) return consume_source_name(s, ident);
    const std::size_t run = digit_run(s);
    if (run == 0) return false;
    std::size_t length = 0;
    for (std::size_t i = 0; i < run; ++i) {
        length = length * 10 + static_cast<std::size_t>(static_cast<unsigned char>(s[i]) - '0');
        if (length > ident.size()) return false;  // also keeps a long run from overflowing
    }
    return length == ident.size() && starts_with(s.substr(run), ident);
}

// A checked keyword split once into its namespace part and its last segment, so the selector
// does not split it again for each of a cubin's thousands of symbols.
struct SplitKeyword {
    std::string_view whole, scope, last;
    explicit SplitKeyword(std::string_view keyword) : whole(keyword) {
        const std::size_t pos = keyword.rfind("::");
        if (pos == std::string_view::npos) {
            last = keyword;
        } else {
            scope = keyword.substr(0, pos);
            last = keyword.substr(pos + 2);
        }
    }
};

// For a namespaced keyword: strips `_ZN` and every scope segment from `name`. False when the
// name is not in that scope.
bool strip_scope(std::string_view &name, std::string_view scope) {
    if (!starts_with(name, "_ZN")) return false;
    name.remove_prefix(3);
    while (!scope.empty()) {
        const std::size_t pos = scope.find("::");
        const std::string_view seg = scope.substr(0, pos);
        if (!consume_source_name(name, seg)) return false;
        scope = pos == std::string_view::npos ? std::string_view{} : scope.substr(pos + 2);
    }
    return true;
}

}  // namespace

bool is_plain_name(std::string_view name) {
    if (name.empty()) return false;
    for (const char c : name) {
        const auto b = static_cast<unsigned char>(c);
        if (b <= 0x20 || b == 0x7f) return false;
    }
    return true;
}

Status check_keyword(std::string_view keyword) {
    if (keyword.empty()) return Error{Errc::invalid_argument, "keyword is empty"};
    if (keyword.size() > kMaxKeywordLength) {
        return Error{Errc::invalid_argument, "keyword is " + std::to_string(keyword.size()) + " bytes long (at most " +
                                                 std::to_string(kMaxKeywordLength) + ")"};
    }
    std::size_t segment_length = 0;
    for (std::size_t i = 0; i < keyword.size(); ++i) {
        const char c = keyword[i];
        if (is_ident_char(c)) {
            ++segment_length;
            continue;
        }
        if (c == ':' && i + 1 < keyword.size() && keyword[i + 1] == ':' && segment_length > 0 &&
            i + 2 < keyword.size()) {
            segment_length = 0;
            ++i;
            continue;
        }
        std::string shown(keyword.substr(0, 200));
        for (char &ch : shown) {
            if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = '?';
        }
        return Error{Errc::invalid_argument,
                     "keyword '" + shown + "' holds a character outside [A-Za-z0-9_] at offset " + std::to_string(i) +
                         " (keywords are literal identifiers, optionally ns::kernel, never patterns)"};
    }
    return Ok{};
}

namespace {

bool matches_split(std::string_view name, const SplitKeyword &k) {
    if (!is_plain_name(name)) return false;
    if (name == k.whole) return true;
    if (k.scope.empty()) return starts_with(name, "_Z") && matches_digits_then(name.substr(2), k.last);
    return strip_scope(name, k.scope) && matches_digits_then(name, k.last);
}

bool is_exact_identifier_split(std::string_view name, const SplitKeyword &k) {
    if (name == k.whole) return true;
    if (k.scope.empty()) {
        if (!starts_with(name, "_Z")) return false;
        name.remove_prefix(2);
    } else if (!strip_scope(name, k.scope)) {
        return false;
    }
    return starts_with_source_name(name, k.last);
}

}  // namespace

bool matches(std::string_view name, std::string_view keyword) { return matches_split(name, SplitKeyword(keyword)); }

bool is_exact_identifier(std::string_view name, std::string_view keyword) {
    return is_exact_identifier_split(name, SplitKeyword(keyword));
}

Result<std::string_view> select(const std::vector<Candidate> &candidates, std::string_view keyword) {
    // Matches with duplicates merged (a name may appear as several symbols), in name order so
    // the candidate list in an error is stable.
    const SplitKeyword split(keyword);
    std::vector<Candidate> matched;
    for (const Candidate &c : candidates) {
        if (matches_split(c.name, split)) matched.push_back(c);
    }
    std::sort(matched.begin(), matched.end(), [](const Candidate &a, const Candidate &b) { return a.name < b.name; });
    std::size_t kept = 0;
    for (std::size_t i = 0; i < matched.size(); ++i) {
        if (kept > 0 && matched[kept - 1].name == matched[i].name) {
            matched[kept - 1].is_entry = matched[kept - 1].is_entry || matched[i].is_entry;
        } else {
            matched[kept++] = matched[i];
        }
    }
    matched.resize(kept);
    const std::string kw(keyword);
    if (matched.empty()) {
        std::size_t unusable = 0;
        for (const Candidate &c : candidates)
            if (!is_plain_name(c.name)) ++unusable;
        std::string skipped;
        if (unusable > 0) {
            skipped = ", of which " + std::to_string(unusable) +
                      " have a space or control character in their names, which libkjit never uses";
        }
        // What it does hold, so that a typo or a kernel that was never compiled shows.
        std::vector<std::string_view> kernels;
        for (const Candidate &c : candidates) {
            if (c.is_entry && is_plain_name(c.name)) kernels.push_back(c.name);
        }
        std::sort(kernels.begin(), kernels.end());
        kernels.erase(std::unique(kernels.begin(), kernels.end()), kernels.end());
        constexpr std::size_t kListed = 8;
        std::string held = kernels.empty() ? "; it holds no kernel entry" : "; the kernels it holds: ";
        for (std::size_t i = 0; i < kernels.size() && i < kListed; ++i) {
            held += (i ? ", " : "") + std::string(kernels[i]);
        }
        if (kernels.size() > kListed) held += " and " + std::to_string(kernels.size() - kListed) + " more";
        return Error{Errc::not_found, "no function symbol matches keyword '" + kw + "' (" +
                                          std::to_string(candidates.size()) + " function symbols scanned" + skipped +
                                          ")" + held +
                                          ". A template that is never instantiated (no explicit instantiation, no "
                                          "name expression) leaves no symbol at all"};
    }
    if (matched.size() == 1) return matched.front().name;

    std::vector<const Candidate *> entries;
    for (const Candidate &c : matched) {
        if (c.is_entry) entries.push_back(&c);
    }
    if (entries.size() == 1) return entries.front()->name;

    std::string step;
    if (entries.empty()) {
        step = "none of them is a kernel entry";
    } else {
        std::vector<const Candidate *> exact;
        for (const Candidate *c : entries) {
            if (is_exact_identifier_split(c->name, split)) exact.push_back(c);
        }
        if (exact.size() == 1) return exact.front()->name;
        step = std::to_string(entries.size()) + " are kernel entries, " + std::to_string(exact.size()) +
               " of those have the identifier exactly '" + kw + "'";
    }
    std::string message = "keyword '" + kw + "' is ambiguous: " + std::to_string(matched.size()) +
                          " function symbols match and " + step + "; candidates:";
    constexpr std::size_t kMaxListed = 64;
    for (std::size_t i = 0; i < matched.size(); ++i) {
        const Candidate &c = matched[i];
        if (i == kMaxListed) {
            message += "\n  ... and " + std::to_string(matched.size() - kMaxListed) + " more";
            break;
        }
        message += "\n  ";
        message += c.name;
        if (c.is_entry) message += " (kernel entry)";
    }
    return Error{Errc::ambiguous, std::move(message)};
}

}  // namespace kjit::cubin::name_matcher
