// A thread that rewrites one file in place, as `cp new.cubin a.cubin` does: the same inode is
// truncated and written again, over and over, alternating between given contents (written in
// small chunks, so readers meet it short, empty or half old). Readers that map the file get
// SIGBUS when they touch a page past the new end; readers that pread must see an error or a
// whole version, never a signal or a mix.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kjit_test {

class InPlaceRewriter {
public:
    // Starts rewriting `path` with each of `versions` in turn; the file is left holding the
    // last version written when stopped (see last()).
    InPlaceRewriter(std::string path, std::vector<std::string> versions)
        : path_(std::move(path)), versions_(std::move(versions)), thread_([this] { run(); }) {}
    InPlaceRewriter(const InPlaceRewriter &) = delete;
    InPlaceRewriter &operator=(const InPlaceRewriter &) = delete;
    ~InPlaceRewriter() { stop(); }

    void stop() {
        stop_.store(true);
        if (thread_.joinable()) thread_.join();
    }
    std::size_t rewrites() const { return rewrites_.load(); }
    // The index of the version the file holds once stopped.
    std::size_t last() const { return last_; }

private:
    void run() {
        for (std::size_t i = 0; !stop_.load(); ++i) {
            const std::string &bytes = versions_[i % versions_.size()];
            const int fd = ::open(path_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
            if (fd < 0) continue;
            constexpr std::size_t kChunk = 4096;
            for (std::size_t done = 0; done < bytes.size();) {
                const ssize_t n = ::write(fd, bytes.data() + done, std::min(kChunk, bytes.size() - done));
                if (n <= 0) break;
                done += static_cast<std::size_t>(n);
            }
            ::close(fd);
            last_ = i % versions_.size();
            rewrites_.fetch_add(1);
        }
    }

    std::string path_;
    std::vector<std::string> versions_;
    std::atomic<bool> stop_{false};
    std::atomic<std::size_t> rewrites_{0};
    std::size_t last_ = 0;  // written by the thread, read after join
    std::thread thread_;
};

}  // namespace kjit_test
