#include "log.hpp"

#include "fork_guard.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace kjit {

namespace {

// stderr behind a lock of libkjit's own, renewed in a forked child (fork_guard.hpp): a thread
// of the parent may have been inside a write at the fork, holding it, for as long as nobody reads
// a full pipe. (spdlog's own stderr sinks share one lock with every console sink in the process,
// the host application's too, which is not libkjit's to renew.)
class StderrSink final : public spdlog::sinks::base_sink<std::mutex> {
public:
    void renew_lock_in_forked_child() { fork_guard::renew(mutex_); }

protected:
    void sink_it_(const spdlog::details::log_msg &msg) override {
        // The thread id as the kernel says it, not spdlog's per-thread copy of it, which a forked
        // child inherits from the parent's thread that forked.
        spdlog::details::log_msg here = msg;
        here.thread_id = static_cast<std::size_t>(::gettid());
        spdlog::memory_buf_t text;
        formatter_->format(here, text);
        std::fwrite(text.data(), 1, text.size(), stderr);
    }
    void flush_() override { std::fflush(stderr); }
};

spdlog::logger *make_logger() {
    auto logger = std::make_unique<spdlog::logger>("kjit", std::make_shared<StderrSink>());
    logger->set_pattern("[kjit %L %P:%t] %v");
    const char *env = std::getenv("KJIT_LOG_LEVEL");
    // from_str maps unknown text to "off", which is also the default.
    logger->set_level(env ? spdlog::level::from_str(env) : spdlog::level::off);
    logger->flush_on(spdlog::level::trace);
    return logger.release();
}

std::atomic<spdlog::logger *> logger_slot{nullptr};

void renew_in_forked_child() {
    if (spdlog::logger *logger = logger_slot.load(std::memory_order_relaxed)) {
        static_cast<StderrSink &>(*logger->sinks().front()).renew_lock_in_forked_child();
    }
}
[[maybe_unused]] const bool fork_handler_registered = fork_guard::at_fork_child(renew_in_forked_child);

}  // namespace

spdlog::logger &log() {
    // Leaked on purpose: logging may happen from destructors during exit. No once-guard
    // (fork_guard.hpp).
    return fork_guard::lazy(logger_slot, make_logger);
}

}  // namespace kjit
