// libFuzzer target: sidecar bytes in. parse() and the hit path's find_line() must agree, every
// line parsed must be one the format can hold (can_hold), and whatever parses must survive
// format() -> parse() unchanged.
#include "cubin/sidecar.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace sc = kjit::cubin::sidecar;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char *>(data), size);
    const sc::Contents c = sc::parse(text);
    if (c.problem != sc::classify(text)) std::abort();
    for (const sc::Line &l : c.lines) {
        // Whatever parses is a line the format can hold (no space or control byte in a name).
        if (!sc::can_hold(l)) std::abort();
        // find_line returns the last valid line for a keyword.
        const auto found = sc::find_line(text, l.keyword);
        if (!found) std::abort();
        const sc::Line *last = nullptr;
        for (const sc::Line &m : c.lines) {
            if (m.keyword == l.keyword) last = &m;
        }
        if (found->name != last->name || found->cubin_size != last->cubin_size) std::abort();
    }
    if (c.problem == sc::FileProblem::none) {
        const sc::Contents again = sc::parse(sc::format(c.lines));
        if (again.rejected_lines != 0 || again.lines.size() != c.lines.size()) std::abort();
        for (std::size_t i = 0; i < c.lines.size(); ++i) {
            const sc::Line &a = c.lines[i], &b = again.lines[i];
            if (a.keyword != b.keyword || a.name != b.name || a.cubin_size != b.cubin_size ||
                a.mtime_sec != b.mtime_sec || a.mtime_nsec != b.mtime_nsec || a.content_hash != b.content_hash) {
                std::abort();
            }
        }
    }
    return 0;
}
