// A fake Redis server for the cluster tier's fault tests: it listens on 127.0.0.1 and a free
// port, reads the Redis protocol (arrays of bulk strings, as libkjit sends) and answers each
// command with what the test's handler sends, when and how it wants: slowly, in part, never. It
// shows what a real server cannot be made to do on cue: a reply trickled a byte at a time, a
// reply far larger than asked for, a stall that starts half-way through a store.
//
// One thread per connection calls the handler, so a handler may block (trickle, stall) without
// holding up another connection. The destructor stops every handler (Client::stopping, and a
// stall returns) and joins the threads. Requests loop only on loopback and are bounded by the
// handlers' own limits.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace kjit_test {

class FakeRedis {
public:
    // One connection, as the handler sees it.
    class Client {
    public:
        Client(FakeRedis &server, int fd) : server_(server), fd_(fd) {}
        // Sends `bytes` whole; false when the peer is gone (it hung up or reset).
        bool send(std::string_view bytes);
        // Waits until the peer hangs up, the server stops, or `longest` passes, answering
        // nothing; true when the peer hung up.
        bool stall(std::chrono::milliseconds longest = std::chrono::minutes(2));
        bool stopping() const;
        int fd() const { return fd_; }

    private:
        FakeRedis &server_;
        int fd_;
    };
    using Handler = std::function<void(Client &, const std::vector<std::string> &command)>;

    explicit FakeRedis(Handler handler);
    ~FakeRedis();
    FakeRedis(const FakeRedis &) = delete;
    FakeRedis &operator=(const FakeRedis &) = delete;

    int port() const { return port_; }
    std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
    // Connections accepted so far.
    int connections() const { return connections_.load(); }

    // Replies in the Redis protocol.
    static std::string nil() { return "$-1\r\n"; }
    static std::string ok() { return "+OK\r\n"; }
    static std::string integer(long long n) { return ":" + std::to_string(n) + "\r\n"; }
    static std::string bulk(std::string_view s) {
        return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n";
    }
    static std::string array(const std::vector<std::string> &bulks);

private:
    void accept_loop();
    void serve(int fd);

    Handler handler_;
    int listener_ = -1;
    int port_ = 0;
    std::atomic<bool> stopping_{false};
    std::atomic<int> connections_{0};
    std::mutex mutex_;
    std::vector<int> client_fds_;
    std::vector<std::thread> threads_;
    std::thread acceptor_;
};

}  // namespace kjit_test
