// libFuzzer target: the computed-include expansion (include_macros, which the include scanner
// runs on `#include MACRO(x)` and `__has_include(MACRO)` with every #define and -D it saw). It
// must never crash, read out of bounds, recurse without bound or run past its budget (ctest
// gives each input 10 s and 2 GiB). Layout: lines ('\n'; a backslash before the newline joins
// the next line, as in a header). The last line is the operand (a leading "#include" is
// skipped); each line before it is a definition: "-D..." the value of a -D option, else the text
// after `define` of a #define (a leading "#define" / "# define" is skipped).
// Checked: the table counts each distinct definition once; the names come back sorted and
// distinct, and none when not followed; the same operand and table give the same answer; and a
// table with one definition less gives no name the full one does not (each macro may also be
// left undefined, so a definition only ever adds candidates: a superset, never less).
#include "key/include_macros.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace im = kjit::key::include_macros;

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// `line` without a leading `word` (after '#' and blanks for a directive).
std::string_view skip_directive(std::string_view line, std::string_view word) {
    std::size_t i = 0;
    while (i < line.size() && is_blank(line[i])) ++i;
    if (i >= line.size() || line[i] != '#') return line;
    ++i;
    while (i < line.size() && is_blank(line[i])) ++i;
    if (line.substr(i, word.size()) != word) return line;
    return line.substr(i + word.size());
}

std::vector<std::string> logical_lines(std::string_view text) {
    std::vector<std::string> lines(1);
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
            ++i;
        } else if (text[i] == '\n') {
            lines.emplace_back();
        } else {
            lines.back() += text[i];
        }
    }
    return lines;
}

// Adds `line` to `t`, checking the count; true when it was new.
bool add(im::Table &t, const std::string &line) {
    const std::size_t before = t.size();
    const bool is_option = line.size() >= 2 && line[0] == '-' && line[1] == 'D';
    const bool added =
        is_option ? t.add_option(std::string_view(line).substr(2)) : t.add_directive(skip_directive(line, "define"));
    if (t.size() != before + (added ? 1 : 0)) std::abort();
    return added;
}

void check_sorted(const im::Expansion &e) {
    if (!e.followed && !e.names.empty()) std::abort();
    for (std::size_t i = 1; i < e.names.size(); ++i) {
        if (!(e.names[i - 1] < e.names[i])) std::abort();  // sorted and distinct
    }
}

bool same(const im::Expansion &a, const im::Expansion &b) { return a.followed == b.followed && a.names == b.names; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    const std::vector<std::string> lines = logical_lines(std::string_view(reinterpret_cast<const char *>(data), size));
    const std::string operand(skip_directive(lines.back(), "include"));
    const std::size_t n = lines.size() - 1;
    im::Table full, less;
    for (std::size_t i = 0; i < n; ++i) {
        const bool added = add(full, lines[i]);
        if (added && add(full, lines[i])) std::abort();  // each distinct definition once
        if (i + 1 < n) add(less, lines[i]);
    }
    const im::Expansion e = im::header_names(operand, full);
    check_sorted(e);
    if (!same(e, im::header_names(operand, full))) std::abort();
    if (n == 0 || !e.followed) return 0;
    const im::Expansion fewer = im::header_names(operand, less);
    check_sorted(fewer);
    if (!fewer.followed) return 0;  // a reserved name that only the last line defines, say
    std::size_t j = 0;
    for (const im::HeaderName &h : fewer.names) {
        while (j < e.names.size() && e.names[j] < h) ++j;
        if (j == e.names.size() || !(e.names[j] == h)) std::abort();  // a candidate lost
    }
    return 0;
}
