// A Redis server named by a host name whose DNS never answers (issue 45, item 4): getaddrinfo has
// no deadline of its own, so a dead DNS held every call for resolv.conf's timeouts (10 s and
// more) where a dead server costs one connect timeout. The lookup now runs on a thread the
// call waits for until its deadline.
//
// This binary defines getaddrinfo itself, so libkjit's calls come here (an executable's symbols
// come first in the dynamic linker's search, sanitizer builds too): a name under
// .dead-dns.invalid blocks until the test releases it, as a DNS that never answers; every other
// name goes to the real one. No timing is asserted: a call that waited for the lookup would not
// return before the release, so each call returning while the lookup still blocks is the proof.
#include "kjit/kjit.h"

#include "test_support.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <netdb.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

using namespace kjit_test;

// The test forks while the look-up's thread (blocked in the DNS above) is alive, and the child
// starts one of its own: TSan allows that only with die_after_fork=0, as tests/api/fork_test.cpp
// sets it (the child's only other use of the parent's state is libkjit's, which is renewed).
extern "C" const char *__tsan_default_options() { return "die_after_fork=0"; }

namespace {

std::mutex dns_mutex;
std::condition_variable dns_released_cv;
bool dns_released = false;
std::atomic<int> dns_started{0};
std::atomic<int> dns_finished{0};

bool is_dead(const char *node) {
    static const std::string suffix = ".dead-dns.invalid";
    const std::size_t n = node ? std::strlen(node) : 0;
    return n >= suffix.size() && std::strcmp(node + n - suffix.size(), suffix.c_str()) == 0;
}

void release_dns() {
    std::lock_guard<std::mutex> lock(dns_mutex);
    dns_released = true;
    dns_released_cv.notify_all();
}

}  // namespace

extern "C" int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res) {
    using Real = int (*)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
    static const Real real = reinterpret_cast<Real>(::dlsym(RTLD_NEXT, "getaddrinfo"));
    if (!is_dead(node) || (hints && (hints->ai_flags & AI_NUMERICHOST))) return real(node, service, hints, res);
    dns_started.fetch_add(1);
    std::unique_lock<std::mutex> lock(dns_mutex);
    dns_released_cv.wait(lock, [] { return dns_released; });
    dns_finished.fetch_add(1);
    return EAI_AGAIN;
}

namespace {

kjit_status compile_with(const std::string &cache, int i, const std::string &spec, std::string *error) {
    const std::string source = "__global__ void dns_" + std::to_string(i) + "(float *x) { x[0] = 1; }\n";
    const std::string keyword = "dns_" + std::to_string(i);
    kjit_compile_options o = KJIT_COMPILE_OPTIONS_INIT;
    o.cache_dir = cache.c_str();
    o.arch = "sm_80";
    o.remote_storage = spec.c_str();
    char cubin[1024];
    const kjit_status st = kjit_compile(source.c_str(), keyword.c_str(), &o, cubin, sizeof cubin, nullptr);
    *error = st == KJIT_OK ? std::string() : std::string(kjit_last_error());
    return st;
}

kjit_stats stats() {
    kjit_stats s = KJIT_STATS_INIT;
    EXPECT_EQ(kjit_get_stats(&s), KJIT_OK);
    return s;
}

}  // namespace

// Calls fail open while the DNS says nothing: each compiles here, counted as a remote timeout,
// and they share the one lookup in flight; a forked child, which has none of the parent's lookup
// threads, starts its own instead of waiting on one that will never finish; released, the
// lookup's thread ends.
TEST(RemoteDnsDeadline, ADeadDnsCostsTheConnectTimeoutNotTheLookup) {
    TempDir dir;
    // breaker=1ms: the server's breaker, open after each failed call, lets the next call (120 ms
    // later) probe it again, so each call reaches the look-up.
    const std::string spec = "redis://cache.dead-dns.invalid:6379 connect-timeout=100ms breaker=1ms";
    const kjit_stats before = stats();
    std::string error;
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(compile_with(dir.file("cache"), i, spec, &error), KJIT_OK) << error;
        EXPECT_EQ(dns_finished.load(), 0) << "a call waited for the lookup itself";
        if (i < 2) ::usleep(120'000);  // past the breaker's back-off: the next call asks again
    }
    const kjit_stats after = stats();
    EXPECT_EQ(after.nvrtc_compiles - before.nvrtc_compiles, 3u);
    EXPECT_GE(after.remote_timeouts - before.remote_timeouts, 1u) << "the lookup's deadline is a timeout";
    EXPECT_EQ(dns_started.load(), 1) << "each call started a lookup of its own: a dead DNS would pile up threads";

    std::fflush(nullptr);
    const pid_t child = ::fork();
    if (child == 0) {
        std::string why;
        ::usleep(120'000);  // past the breaker's back-off, as between the calls above
        const int started = dns_started.load();
        const kjit_status st = compile_with(dir.file("child-cache"), 10, spec, &why);
        // The child's own lookup thread is blocked too (nobody releases it here): the call
        // returned without it, and started one.
        ::_exit(st == KJIT_OK && dns_started.load() == started + 1 && dns_finished.load() == 0 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;

    release_dns();
    for (int waited = 0; dns_finished.load() < 1 && waited < 10'000; ++waited) ::usleep(1000);
    EXPECT_EQ(dns_finished.load(), 1) << "the lookup thread did not end once the DNS answered";
}
