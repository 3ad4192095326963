#include "fake_redis.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

namespace kjit_test {

namespace {

// One whole command at the front of `buffer` (an array of bulk strings), removed from it; false
// when more bytes are needed.
bool take_command(std::string &buffer, std::vector<std::string> &command) {
    command.clear();
    std::size_t pos = 0;
    auto line = [&](std::string &out) {
        const auto end = buffer.find("\r\n", pos);
        if (end == std::string::npos) return false;
        out = buffer.substr(pos, end - pos);
        pos = end + 2;
        return true;
    };
    std::string header;
    if (!line(header)) return false;
    if (header.empty() || header[0] != '*') throw std::runtime_error("fake redis: not an array: " + header);
    const long count = std::strtol(header.c_str() + 1, nullptr, 10);
    for (long i = 0; i < count; ++i) {
        std::string length;
        if (!line(length)) return false;
        const std::size_t n = std::strtoul(length.c_str() + 1, nullptr, 10);
        if (buffer.size() < pos + n + 2) return false;
        command.push_back(buffer.substr(pos, n));
        pos += n + 2;
    }
    buffer.erase(0, pos);
    return true;
}

}  // namespace

std::string FakeRedis::array(const std::vector<std::string> &bulks) {
    std::string out = "*" + std::to_string(bulks.size()) + "\r\n";
    for (const std::string &b : bulks) out += bulk(b);
    return out;
}

bool FakeRedis::Client::send(std::string_view bytes) {
    while (!bytes.empty()) {
        const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

bool FakeRedis::Client::stall(std::chrono::milliseconds longest) {
    const auto until = std::chrono::steady_clock::now() + longest;
    while (!stopping() && std::chrono::steady_clock::now() < until) {
        pollfd p{fd_, POLLRDHUP, 0};
        if (::poll(&p, 1, 20) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return true;
    }
    return false;
}

bool FakeRedis::Client::stopping() const { return server_.stopping_.load(); }

FakeRedis::FakeRedis(Handler handler) : handler_(std::move(handler)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener_ < 0) throw std::runtime_error("fake redis: socket failed");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (::bind(listener_, reinterpret_cast<sockaddr *>(&address), sizeof address) != 0 ||
        ::listen(listener_, 64) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr *>(&address), &length) != 0) {
        ::close(listener_);
        throw std::runtime_error("fake redis: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
}

FakeRedis::~FakeRedis() {
    stopping_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread &t : threads_) t.join();
    for (int fd : client_fds_) ::close(fd);
    ::close(listener_);
}

void FakeRedis::accept_loop() {
    while (!stopping_) {
        pollfd p{listener_, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) continue;
        const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        ++connections_;
        std::lock_guard<std::mutex> lock(mutex_);
        client_fds_.push_back(fd);
        threads_.emplace_back([this, fd] { serve(fd); });
    }
}

void FakeRedis::serve(int fd) {
    Client client(*this, fd);
    std::string buffer;
    std::vector<std::string> command;
    char chunk[65536];
    while (!stopping_) {
        while (take_command(buffer, command)) {
            handler_(client, command);
            if (stopping_) return;
        }
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) continue;
        const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) return;  // the client went
        buffer.append(chunk, static_cast<std::size_t>(n));
    }
}

}  // namespace kjit_test
