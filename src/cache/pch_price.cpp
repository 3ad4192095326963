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

// Version 2 adds each line's history (processes, misses); a version 1 record is read without it.
constexpr std::string_view kHeader = "kjit-pch-prices 2\n";
constexpr std::string_view kHeaderV1 = "kjit-pch-prices 1\n";
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

// What this process knows of an identity: the misses it asked about, whether it made the PCH,
// whether it has noted a compile of it (counted once in the record's processes), and the
// record's history as it was at its first miss (earlier processes only).
struct Here {
    unsigned misses = 0;
    bool made = false;
    bool noted = false;
    unsigned history_processes = 0;
    std::uint64_t history_misses = 0;
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

// "<identity> <noted> <plain us> <n> <made us> <n> <used us> <n> <processes> <misses>" per
// line (version 1: without the last two).
std::vector<Line> parse(std::string_view text) {
    std::vector<Line> lines;
    const bool v1 = text.substr(0, kHeaderV1.size()) == kHeaderV1;
    if (!v1 && text.substr(0, kHeader.size()) != kHeader) return lines;
    text.remove_prefix(v1 ? kHeaderV1.size() : kHeader.size());
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
            !take(rest, p.used_n, v1 ? '\n' : ' ') ||
            (!v1 && (!take(rest, p.processes, ' ') || !take(rest, p.misses, '\n') || p.misses < p.processes ||
                     p.processes > kMaxProcesses)) ||
            !rest.empty()) {
            continue;
        }
        lines.push_back(std::move(line));
    }
    return lines;
}

std::string format(const std::vector<Line> &lines) {
    std::string out(kHeader);
    for (const Line &l : lines) {
        char fields[200];
        const Prices &p = l.prices;
        std::snprintf(fields, sizeof fields,
                      " %" PRId64 " %" PRIu64 " %u %" PRIu64 " %u %" PRIu64 " %u %u %" PRIu64 "\n", l.noted_sec,
                      p.plain_us, p.plain_n, p.made_us, p.made_n, p.used_us, p.used_n, p.processes, p.misses);
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

// With plain and used prices measured and using faster (worth_using): what each compile that
// uses the PCH saves, and what the one that makes it costs over a plain compile (0 where the
// making was not measured or cost less), in microseconds.
std::uint64_t use_saving(const Prices &p) { return p.plain_us - p.used_us; }
std::uint64_t making_extra(const Prices &p) {
    return p.made_n > 0 && p.made_us > p.plain_us ? p.made_us - p.plain_us : 0;
}

}  // namespace

bool worth_using(const Prices &p) {
    // Slower with it than without, once measured: plain compiles from now on.
    return !(p.used_n > 0 && p.plain_n > 0 && p.used_us >= p.plain_us);
}

std::size_t fewest_misses_that_pay(const Prices &p) {
    if (p.used_n == 0 || p.plain_n == 0) return 0;
    if (!worth_using(p)) return kNeverPays;
    // n misses: the making's extra over a plain compile, repaid by n - 1 uses' savings.
    const std::uint64_t saving = use_saving(p);
    const std::uint64_t extra = making_extra(p);
    return std::max<std::size_t>(2, static_cast<std::size_t>((extra + saving - 1) / saving) + 1);
}

bool worth_making(const Prices &p, unsigned misses_here) {
    if (!worth_using(p)) return false;
    // How many more misses of it this process may expect after this one: as many as earlier
    // processes had on average, while it has had no more than that; beyond it, or with no
    // history, as many more as it has had (a first miss then says nothing of more to come).
    const double mean = p.processes > 0 ? static_cast<double>(p.misses) / p.processes : 0;
    const bool within_history = p.processes > 0 && misses_here + 1 <= mean;
    const double more = within_history ? mean - (misses_here + 1) : misses_here;
    if (p.used_n > 0 && p.plain_n > 0) {
        // Make it when the misses expected repay the making at the measured saving.
        return more > 0 && more * static_cast<double>(use_saving(p)) >= static_cast<double>(making_extra(p));
    }
    // Nothing measured of its use. Where earlier processes each had it at least twice and none
    // has tried a PCH of it, this one tries at its first miss: at most one making's extra cost
    // (12% to 36% of a compile on the real clients: docs/batch.md), once, to learn the prices.
    if (p.made_n == 0 && within_history && misses_here == 0 && mean >= 2) return true;
    if (within_history) return false;
    // Else at the fourth miss (making one costs one to three uses' saving: docs/batch.md;
    // DeepGEMM's FP8 GEMMs come in threes, and a PCH made by the third was never used); where
    // one was made before and never used, only at the sixth.
    return misses_here >= (p.made_n > 0 ? 5u : 3u);
}

Prices recorded(const std::string &cache_dir, const std::string &identity) {
    for (const Line &l : read_record(cache_dir)) {
        if (l.identity == identity) return l.prices;
    }
    return {};
}

bool advise(const std::string &cache_dir, const std::string &identity) {
    Prices prices = recorded(cache_dir, identity);
    Here seen;
    {
        Process &p = process();
        std::lock_guard<std::mutex> lock(p.mutex);
        Here &h = p.identities[identity];
        if (h.misses == 0) {  // this process's first: the history is the earlier processes'
            h.history_processes = prices.processes;
            h.history_misses = prices.misses;
        }
        seen = h;
        ++h.misses;
    }
    // What this process has noted since is its own, not history: the history read at its first.
    prices.processes = seen.history_processes;
    prices.misses = seen.history_misses;
    return seen.made ? worth_using(prices) : worth_making(prices, seen.misses);
}

void note(const std::string &cache_dir, const std::string &identity, Compile kind, double seconds, bool shared) {
    bool first_here = false;
    {
        Process &p = process();
        std::lock_guard<std::mutex> lock(p.mutex);
        Here &h = p.identities[identity];
        if (kind == Compile::made_pch) h.made = true;
        first_here = !h.noted;
        h.noted = true;
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
    // The history: one more process at its first compile of it, one more miss at each.
    if (first_here) ++p.processes;
    ++p.misses;
    if (p.processes > kMaxProcesses) {
        p.processes /= 2;
        p.misses /= 2;
    }
    p.misses = std::max<std::uint64_t>(p.misses, p.processes);
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
