#include "cache/pch_price.hpp"

#include "store/cache_layout.hpp"
#include "util/filesystem.hpp"
#include "util/fork_guard.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kjit::cache::pch_price {

namespace {

constexpr std::string_view kHeader = "kjit-pch-prices 1\n";
// Larger than kMaxIdentities lines can be: not ours.
constexpr std::size_t kMaxRecordBytes = 1u << 20;
// A mean moves by 1/kWeight of each new sample once it has that many: recent compiles count
// most (the machine's load, NVRTC's build), a single outlier little.
constexpr unsigned kWeight = 8;
constexpr unsigned kMaxCount = 1'000'000;

struct Line {
    std::string identity;
    std::int64_t noted_sec = 0;
    Prices prices;
};

// What this process knows of an identity: the misses it asked about, whether it made the PCH.
struct Here {
    unsigned misses = 0;
    bool made = false;
};

struct Process {
    std::mutex mutex;
    std::unordered_map<std::string, Here> identities;
};

std::atomic<Process *> process_slot{nullptr};

Process &process() {
    return fork_guard::lazy(process_slot, [] { return new Process(); });  // no once-guard (fork_guard.hpp)
}

// A forked child's PCHs are its own (pch_folders.hpp): it has made none, seen no miss.
void renew_in_forked_child() {
    Process *p = process_slot.load(std::memory_order_relaxed);
    if (!p) return;
    fork_guard::renew(p->mutex);
    fork_guard::renew(p->identities);
}
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::pch_prices, renew_in_forked_child);

std::string record_path(const std::string &cache_dir) { return cache_dir + "/" + store::cache_layout::kPchPricesFile; }

template <typename T>
bool take(std::string_view &text, T &value, char separator) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end == text.data() + text.size() || *end != separator) return false;
    text.remove_prefix(static_cast<std::size_t>(end - text.data()) + 1);
    return true;
}

// "<identity> <noted> <plain us> <n> <made us> <n> <used us> <n>" per line.
std::vector<Line> parse(std::string_view text) {
    std::vector<Line> lines;
    if (text.substr(0, kHeader.size()) != kHeader) return lines;
    text.remove_prefix(kHeader.size());
    while (!text.empty()) {
        const std::size_t end = text.find('\n');
        if (end == std::string_view::npos) break;  // a torn last line
        std::string_view rest = text.substr(0, end + 1);
        text.remove_prefix(end + 1);
        Line line;
        const std::size_t space = rest.find(' ');
        if (space == 0 || space == std::string_view::npos || space > 64) continue;
        line.identity.assign(rest.substr(0, space));
        rest.remove_prefix(space + 1);
        Prices &p = line.prices;
        if (!take(rest, line.noted_sec, ' ') || !take(rest, p.plain_us, ' ') || !take(rest, p.plain_n, ' ') ||
            !take(rest, p.made_us, ' ') || !take(rest, p.made_n, ' ') || !take(rest, p.used_us, ' ') ||
            !take(rest, p.used_n, '\n') || !rest.empty()) {
            continue;
        }
        lines.push_back(std::move(line));
    }
    return lines;
}

std::string format(const std::vector<Line> &lines) {
    std::string out(kHeader);
    for (const Line &l : lines) {
        char fields[160];
        const Prices &p = l.prices;
        std::snprintf(fields, sizeof fields, " %" PRId64 " %" PRIu64 " %u %" PRIu64 " %u %" PRIu64 " %u\n", l.noted_sec,
                      p.plain_us, p.plain_n, p.made_us, p.made_n, p.used_us, p.used_n);
        out += l.identity;
        out += fields;
    }
    return out;
}

std::vector<Line> read_record(const std::string &cache_dir) {
    const auto text = read_small_file(record_path(cache_dir), kMaxRecordBytes);
    return text ? parse(*text) : std::vector<Line>();
}

void add_sample(std::uint64_t &mean, unsigned &n, std::uint64_t sample) {
    n = std::min(n + 1, kMaxCount);
    const double weight = 1.0 / std::min(n, kWeight);
    mean = static_cast<std::uint64_t>(static_cast<double>(mean) +
                                      (static_cast<double>(sample) - static_cast<double>(mean)) * weight);
}

}  // namespace

bool worth_using(const Prices &p) {
    // Slower with it than without, once measured: plain compiles from now on.
    return !(p.used_n > 0 && p.plain_n > 0 && p.used_us >= p.plain_us);
}

bool worth_making(const Prices &p, unsigned misses_here) {
    // A first miss says nothing of more to come.
    if (misses_here == 0) return false;
    if (!worth_using(p)) return false;
    if (p.used_n > 0 && p.plain_n > 0) {
        // Expect as many more misses as this process has had: make it when they repay the making.
        const std::uint64_t saving = p.plain_us - p.used_us;
        const std::uint64_t extra = p.made_n > 0 && p.made_us > p.plain_us ? p.made_us - p.plain_us : 0;
        return static_cast<std::uint64_t>(misses_here) * saving >= extra;
    }
    // Nothing measured of its use: try it at the fourth miss (making one costs one to three
    // uses' saving: docs/batch.md; DeepGEMM's FP8 GEMMs come in threes, and a PCH made by the
    // third was never used); where one was made before and never used, only at the sixth.
    return misses_here >= (p.made_n > 0 ? 5u : 3u);
}

Prices recorded(const std::string &cache_dir, const std::string &identity) {
    for (const Line &l : read_record(cache_dir)) {
        if (l.identity == identity) return l.prices;
    }
    return {};
}

bool advise(const std::string &cache_dir, const std::string &identity) {
    Here seen;
    {
        Process &p = process();
        std::lock_guard<std::mutex> lock(p.mutex);
        Here &h = p.identities[identity];
        seen = h;
        ++h.misses;
    }
    const Prices prices = recorded(cache_dir, identity);
    return seen.made ? worth_using(prices) : worth_making(prices, seen.misses);
}

void note(const std::string &cache_dir, const std::string &identity, Compile kind, double seconds, bool shared) {
    if (kind == Compile::made_pch) {
        Process &p = process();
        std::lock_guard<std::mutex> lock(p.mutex);
        p.identities[identity].made = true;
    }
    std::vector<Line> lines = read_record(cache_dir);
    auto it = std::find_if(lines.begin(), lines.end(), [&](const Line &l) { return l.identity == identity; });
    Line line;
    if (it != lines.end()) {
        line = std::move(*it);
        lines.erase(it);
    } else {
        line.identity = identity;
    }
    const auto sample = static_cast<std::uint64_t>(std::max(0.0, seconds) * 1e6);
    Prices &p = line.prices;
    switch (kind) {
        case Compile::plain: add_sample(p.plain_us, p.plain_n, sample); break;
        case Compile::made_pch: add_sample(p.made_us, p.made_n, sample); break;
        case Compile::used_pch: add_sample(p.used_us, p.used_n, sample); break;
    }
    line.noted_sec = realtime_ns() / 1'000'000'000;
    // The most recently noted last; the oldest dropped past the limit.
    lines.push_back(std::move(line));
    if (lines.size() > kMaxIdentities) {
        lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(kMaxIdentities));
    }
    (void)replace_file(record_path(cache_dir), cache_dir + "/" + std::string(store::cache_layout::kPchPricesTempPrefix),
                       {}, format(lines), shared ? kGroupWritable : 0);
}

}  // namespace kjit::cache::pch_price
