// PCH prices: whether a miss compiled alone (kjit_compile) should use NVRTC's automatic
// precompiled header, decided by what one has cost and saved for its header identity
// (key::pch_identity), measured at run time and remembered in the cache folder for later
// processes; and, for a batch, which plans its own PCHs knowing its misses, how many misses of an
// identity make one pay (fewest_misses_that_pay). Batches note their compiles' prices too.
//
// A PCH lives in its process's folder (compile::pch_folders), and NVRTC cannot use one made by
// another process (warning 20282: its PCH heap is at another address): the compile that makes
// it costs more than a plain one, and each later compile of the same identity in that process
// may cost less, or more (PyTorch measured NVRTC's PCH slower on some sets and left it off). So
// nothing is guessed. What each kind of compile took (plain, making the PCH, using it) is kept
// per identity in `<cache>/.kjit-pch-prices`, with the identity's history: how many processes
// compiled it and how many misses of it they had. A process
// - with nothing known of an identity, makes one at its fourth miss (a set whose identities each
//   compile at most three times, as humming's and DeepGEMM's do, never pays for one);
// - where earlier processes had two or more misses of it each and no PCH of it was tried, makes
//   one at its first miss, once, to learn its prices;
// - with prices known, makes one at the miss where the misses it can expect after it (as many as
//   earlier processes had, while it has had no more; beyond that, as many as it has had) repay
//   the making at the measured saving, and never where using one was not faster than a plain
//   compile; keeps using it while it saves time.
// The prices only ever choose how to compile, never what: a wrong or planted record costs time,
// not a wrong cubin. Knows the filesystem and the cache layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kjit::cache::pch_price {

// How one compile of a header identity ran.
enum class Compile {
    plain,     // without a PCH
    made_pch,  // the first with -pch in its process: it made the PCH
    used_pch,  // with the PCH that process had made
};

// Whether this process's next miss of `identity` (hex digits), compiled alone, should pass
// NVRTC's automatic PCH, from the misses of it this process has asked about so far, whether it
// made the PCH (noted by note()), and the record in `cache_dir` (unreadable or damaged: nothing
// known; its history as it was at this process's first miss of it). Counts this miss. Thread
// safe.
bool advise(const std::string &cache_dir, const std::string &identity);

// Records that a compile of `identity` ran as `kind` and took `seconds` (the NVRTC run), in this
// process and in `cache_dir`'s record, with one more miss in its history (and one more process,
// at this process's first; rewritten whole through a temp file and a rename, group writable
// when `shared`; a lost race loses one sample; best effort, never an error). Thread safe.
void note(const std::string &cache_dir, const std::string &identity, Compile kind, double seconds, bool shared);

// What advise() would say from the record alone for a process that has seen `misses_here` misses
// of an identity and made no PCH of it: the rule itself, for tests. The costs are in
// microseconds, each with the number of compiles it is the mean of (0: unknown); the history is
// the earlier processes'.
struct Prices {
    std::uint64_t plain_us = 0, made_us = 0, used_us = 0;
    unsigned plain_n = 0, made_n = 0, used_n = 0;
    // The history: how many processes compiled it (the most recent kMaxProcesses, halved past
    // that with `misses`) and how many misses of it they had; for advise(), the processes before
    // this one.
    unsigned processes = 0;
    std::uint64_t misses = 0;
};
bool worth_making(const Prices &prices, unsigned misses_here);
// Whether a process that made the PCH should keep using it.
bool worth_using(const Prices &prices);

// For a batch, which knows how many misses of an identity one worker will compile: the fewest
// (at least 2) for which making the PCH at the first and using it for the others costs no more
// than compiling them all plain, at the measured prices; 0 where the record does not say (no
// plain or no used price); kNeverPays where using one was not faster than a plain compile.
constexpr std::size_t kNeverPays = static_cast<std::size_t>(-1);
std::size_t fewest_misses_that_pay(const Prices &prices);

// The record keeps this many identities, the most recently noted; a malformed line is skipped.
constexpr std::size_t kMaxIdentities = 1024;
// Its history counts the most recent processes: past this many, both counts are halved (the mean
// kept), so that a workload that changes is seen within a few dozen processes.
constexpr unsigned kMaxProcesses = 64;

// The record's prices of `identity` (none known: all zero), for tests.
Prices recorded(const std::string &cache_dir, const std::string &identity);

}  // namespace kjit::cache::pch_price
