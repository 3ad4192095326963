// The cluster tier's single flight over the backends' seam (remote/backend.hpp), with no Redis:
// a backend that keeps its values in memory, as a new kind of server would, proves that the
// tier's look-up, claim, wait, store, release and failover need nothing of the Redis protocol;
// and that the scheme table refuses a scheme no backend speaks. (remote_test.cpp runs the same
// tier against real Redis servers, through libkjit.so.)
#include "storage/remote/tier.hpp"
#include "storage/remote/backend.hpp"
#include "storage/remote/key_layout.hpp"

#include "key/cache_key.hpp"
#include "sample_entry.hpp"
#include "test_support.hpp"
#include "util/hashing.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>

namespace {

using kjit::storage::remote::Backend;
using kjit::storage::remote::Claim;
using kjit::storage::remote::Settled;

// A server in memory: one mutex makes each operation atomic, as a server's script does. `broken`
// fails every operation as a link that is down would (the breaker still closed: the tier finds
// out by trying); `refuse_claims` refuses the look-up as an ACL would.
class MemoryBackend final : public Backend {
public:
    explicit MemoryBackend(std::string id) {
        server_.scheme = "memory";
        server_.host = id;
        kjit::storage::remote::name_server(server_);
    }

    const kjit::storage::remote::Server &server() const override { return server_; }
    bool usable() const override { return true; }
    std::int64_t quick_retry_at_ns() const override { return 0; }

    kjit::Result<Claim> look_up_and_claim(const kjit::storage::remote::KeySet &keys, const std::string &token,
                                          std::int64_t, bool read_only) override {
        std::lock_guard<std::mutex> lock(mutex_);
        KJIT_TRY(link());
        ++claims;
        Claim claim;
        if (refuse_claims) {
            claim.kind = Claim::Kind::refused;
            claim.refusal = {"CLAIM", "NOPERM this user has no permissions"};
        } else if (auto it = values.find(keys.entry); it != values.end()) {
            claim.kind = Claim::Kind::entry;
            claim.value = it->second;
        } else if (auto f = values.find(keys.failure); f != values.end()) {
            claim.kind = Claim::Kind::failed;
            claim.value = f->second;
        } else if (auto l = values.find(keys.lease); l != values.end()) {
            claim.kind = l->second.rfind("unstored:", 0) == 0 ? Claim::Kind::unstored : Claim::Kind::held;
            claim.value = l->second;
        } else if (!read_only) {
            values[keys.lease] = token;
            claim.kind = Claim::Kind::owner;
        }
        return claim;
    }
    kjit::Result<kjit::storage::remote::HolderState> poll_holder(const kjit::storage::remote::KeySet &keys) override {
        std::lock_guard<std::mutex> lock(mutex_);
        KJIT_TRY(link());
        kjit::storage::remote::HolderState state;
        state.entry_there = values.count(keys.entry) != 0;
        if (auto f = values.find(keys.failure); f != values.end()) state.failure = f->second;
        if (auto l = values.find(keys.lease); l != values.end()) state.lease = l->second;
        return state;
    }
    kjit::Result<std::vector<kjit::storage::remote::Fetched>> fetch(const std::vector<std::string> &keys) override {
        std::lock_guard<std::mutex> lock(mutex_);
        KJIT_TRY(link());
        std::vector<kjit::storage::remote::Fetched> out(keys.size());
        for (std::size_t i = 0; i < keys.size(); ++i) {
            if (auto it = values.find(keys[i]); it != values.end()) out[i].value = it->second;
        }
        return out;
    }
    kjit::Result<kjit::storage::remote::Stored> put_if_absent(const std::string &key,
                                                              const std::string &value) override {
        std::lock_guard<std::mutex> lock(mutex_);
        KJIT_TRY(link());
        kjit::storage::remote::Stored stored;
        stored.added = values.emplace(key, value).second;
        return stored;
    }
    kjit::Result<std::optional<kjit::storage::remote::Refusal>> put_failure(const std::string &key,
                                                                            const std::string &text, int) override {
        std::lock_guard<std::mutex> lock(mutex_);
        KJIT_TRY(link());
        values[key] = text;
        return std::optional<kjit::storage::remote::Refusal>();
    }
    kjit::Status remove_if_same(const std::string &key, const std::string &value) override {
        std::lock_guard<std::mutex> lock(mutex_);
        KJIT_TRY(link());
        if (auto it = values.find(key); it != values.end() && it->second == value) values.erase(it);
        ++removals;
        return kjit::Ok{};
    }
    kjit::Status leave_marker(const std::string &key, const std::string &token, const std::string &marker,
                              std::int64_t) override {
        std::lock_guard<std::mutex> lock(mutex_);
        KJIT_TRY(link());
        if (auto it = values.find(key); it != values.end() && it->second == token) it->second = marker;
        return kjit::Ok{};
    }
    kjit::Status renew(const std::vector<std::pair<std::string, std::string>> &, std::int64_t) override {
        return kjit::Ok{};
    }
    std::string describe() override { return "  memory: " + std::to_string(size()) + " values\n"; }

    std::size_t size() {
        std::lock_guard<std::mutex> lock(mutex_);
        return values.size();
    }
    std::optional<std::string> value_of(const std::string &key) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = values.find(key);
        return it == values.end() ? std::nullopt : std::optional<std::string>(it->second);
    }
    void set(const std::string &key, const std::string &value) {
        std::lock_guard<std::mutex> lock(mutex_);
        values[key] = value;
    }

    bool broken = false;
    bool refuse_claims = false;
    int claims = 0;
    int removals = 0;

private:
    kjit::Status link() const {
        if (broken) return kjit::Error{kjit::Errc::io, server_.id + ": connection refused"};
        return kjit::Ok{};
    }

    kjit::storage::remote::Server server_;
    std::mutex mutex_;
    std::map<std::string, std::string> values;
};

// The sample entry's cubin, manifest and expectation as the fixture's own members.
class RemoteTier : public ::testing::Test, protected kjit_test::SampleEntry {
protected:
    RemoteTier() : SampleEntry(kjit_test::sample_entry()) {}

    // A tier over `count` memory servers, kept for the process (as the library keeps its tiers:
    // a lease's renewal thread holds the tier and its backend to the process's end).
    kjit::storage::remote::Tier &tier(std::size_t count,
                                      std::chrono::milliseconds wait_timeout = std::chrono::minutes(1)) {
        kjit::storage::remote::Config config;
        config.name_space = "tiertest";
        config.wait_timeout = wait_timeout;
        std::vector<std::unique_ptr<Backend>> backends;
        servers.clear();
        for (std::size_t i = 0; i < count; ++i) {
            auto backend = std::make_unique<MemoryBackend>("server-" + std::to_string(i));
            servers.push_back(backend.get());
            config.servers.push_back(backend->server());
            backends.push_back(std::move(backend));
        }
        // Never destroyed, not even at exit (a static vector's destructor would leave the tiers
        // unreachable, which LeakSanitizer reports): as the library's registry of tiers is.
        static auto *const kept = new std::vector<kjit::storage::remote::Tier *>();
        kept->push_back(new kjit::storage::remote::Tier(std::move(config), std::move(backends)));
        return *kept->back();
    }
    std::string entry_key(const kjit::storage::remote::Tier &t) const { return t.server_key(expected, 'b'); }
    std::string lease_key(const kjit::storage::remote::Tier &t) const { return t.server_key(expected, 'l'); }
    // The memory server that holds `key` (the test's servers hold it on one only).
    MemoryBackend *holder_of(const std::string &key) {
        for (MemoryBackend *s : servers) {
            if (s->value_of(key)) return s;
        }
        return nullptr;
    }

    std::vector<MemoryBackend *> servers;
};

TEST_F(RemoteTier, TheOwnersEntryIsFetchedByTheNextLookUpAndItsLeaseReleased) {
    auto &t = tier(1);
    Settled first = t.settle(expected);
    ASSERT_EQ(first.kind, Settled::Kind::owner);
    ASSERT_TRUE(servers[0]->value_of(lease_key(t)));
    t.put(expected, manifest, cubin, first.lease.get());
    first.lease.reset();
    EXPECT_FALSE(servers[0]->value_of(lease_key(t))) << "a stored entry's lease is deleted at its release";
    Settled second = t.settle(expected);
    ASSERT_EQ(second.kind, Settled::Kind::fetched);
    EXPECT_EQ(second.entry->cubin, cubin);
    EXPECT_EQ(second.entry->manifest.name, manifest.name);
    const auto fetched = t.fetch_many({expected});
    ASSERT_EQ(fetched.size(), 1u);
    ASSERT_TRUE(fetched[0]);
    EXPECT_EQ(fetched[0]->cubin, cubin);
}

TEST_F(RemoteTier, AWaiterGetsTheEntryTheHolderStores) {
    auto &t = tier(1);
    Settled held = t.settle(expected);
    ASSERT_EQ(held.kind, Settled::Kind::owner);
    const std::uint64_t waits_before = kjit::storage::remote::counters().lease_waits.load();
    EXPECT_EQ(t.settle(expected, /*defer_waits=*/true).kind, Settled::Kind::busy);
    std::thread holder([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
        t.put(expected, manifest, cubin, held.lease.get());
        held.lease.reset();
    });
    Settled waited = t.settle(expected);
    holder.join();
    ASSERT_EQ(waited.kind, Settled::Kind::fetched);
    EXPECT_EQ(waited.entry->cubin, cubin);
    EXPECT_EQ(kjit::storage::remote::counters().lease_waits.load(), waits_before + 1);
}

TEST_F(RemoteTier, AHolderThatCouldNotStoreSendsItsWaitersToCompileAtOnce) {
    auto &t = tier(1);
    Settled held = t.settle(expected);
    ASSERT_EQ(held.kind, Settled::Kind::owner);
    held.lease->not_stored("too large");
    held.lease.reset();
    const auto marker = servers[0]->value_of(lease_key(t));
    ASSERT_TRUE(marker);
    EXPECT_NE(marker->find("too large"), std::string::npos) << *marker;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(t.settle(expected).kind, Settled::Kind::compile_here);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "it did not wait out the lease";
}

TEST_F(RemoteTier, ASharedFailureIsReturnedToTheNextLookUp) {
    auto &t = tier(1);
    Settled held = t.settle(expected);
    ASSERT_EQ(held.kind, Settled::Kind::owner);
    t.put_failure(expected, kjit::Error{kjit::Errc::compile, "error: expected a ';'"}, *held.lease);
    held.lease.reset();
    Settled next = t.settle(expected);
    ASSERT_EQ(next.kind, Settled::Kind::failed);
    EXPECT_NE(next.failure->message.find("expected a ';'"), std::string::npos) << next.failure->message;
}

TEST_F(RemoteTier, AValueThatFailsVerificationIsRemovedAndIsAMiss) {
    auto &t = tier(1);
    const std::string bad =
        kjit::storage::remote::encode(manifest, cubin, kjit::key::kFormatVersion, "h").substr(0, 100);
    servers[0]->set(entry_key(t), bad);
    const std::uint64_t corrupt_before = kjit::storage::remote::counters().corrupt.load();
    Settled settled = t.settle(expected);
    EXPECT_EQ(settled.kind, Settled::Kind::owner) << "the bad value is a miss, so the caller compiles";
    EXPECT_EQ(kjit::storage::remote::counters().corrupt.load(), corrupt_before + 1);
    EXPECT_GE(servers[0]->removals, 1);
    EXPECT_NE(servers[0]->value_of(entry_key(t)), std::optional<std::string>(bad));
}

TEST_F(RemoteTier, AServerWhoseLinkFailsHandsTheKeyToTheNext) {
    auto &t = tier(2);
    servers[0]->broken = true;
    servers[1]->broken = false;
    Settled settled = t.settle(expected);
    ASSERT_EQ(settled.kind, Settled::Kind::owner);
    EXPECT_EQ(holder_of(lease_key(t)), servers[1]);
    t.put(expected, manifest, cubin, settled.lease.get());
    settled.lease.reset();
    EXPECT_TRUE(servers[1]->value_of(entry_key(t)));
    // Both down: no server, the caller compiles.
    servers[1]->broken = true;
    EXPECT_EQ(t.settle(expected).kind, Settled::Kind::compile_here);
}

TEST_F(RemoteTier, ARefusedLookUpIsCountedAndCompiledHere) {
    auto &t = tier(1);
    servers[0]->refuse_claims = true;
    const std::uint64_t errors_before = kjit::storage::remote::counters().errors.load();
    EXPECT_EQ(t.settle(expected).kind, Settled::Kind::compile_here);
    EXPECT_EQ(kjit::storage::remote::counters().errors.load(), errors_before + 1);
    EXPECT_FALSE(servers[0]->value_of(lease_key(t)));
}

TEST_F(RemoteTier, EachServerDescribesItselfUnderItsName) {
    auto &t = tier(2);
    const std::string text = t.describe_servers();
    EXPECT_EQ(kjit::storage::remote::display(servers[0]->server()), "memory://server-0:6379/0");
    EXPECT_NE(text.find("server memory://server-0:6379/0\n  memory: 0 values\n"), std::string::npos) << text;
    EXPECT_NE(text.find("server memory://server-1:6379/0\n"), std::string::npos) << text;
}

TEST(RemoteBackends, ASchemeNoBackendSpeaksIsRefusedByName) {
    kjit::storage::remote::Server server;
    server.scheme = "s3";
    server.host = "bucket";
    kjit::storage::remote::Config config;
    auto backend = kjit::storage::remote::make_backend(server, config);
    ASSERT_FALSE(backend);
    EXPECT_EQ(backend.error().code, kjit::Errc::invalid_argument);
    EXPECT_NE(backend.error().message.find("'s3'"), std::string::npos) << backend.error().message;
    EXPECT_NE(backend.error().message.find("rediss"), std::string::npos) << backend.error().message;
    server.scheme = "redis";
    EXPECT_TRUE(kjit::storage::remote::make_backend(server, config));
}

}  // namespace
