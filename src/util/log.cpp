#include "util/log.hpp"

#include "util/environment.hpp"
#include "util/fork_guard.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

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

// KJIT_LOG_LEVEL's level: trace, debug, info, warn(ing), err(or), critical or off, in any case;
// unset or empty: off. Anything else is said once on stderr (spdlog's own parser would take it
// for "off" in silence, as it does "DEBUG") and leaves logging off.
spdlog::level::level_enum level_from_environment() {
    const char *env = environment::get(environment::Variable::log_level);
    if (!env || !*env) return spdlog::level::off;
    std::string text(env);
    for (char &c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (text == "warning") text = "warn";
    if (text == "error") text = "err";
    const spdlog::level::level_enum level = spdlog::level::from_str(text);
    if (level == spdlog::level::off && text != "off") {
        std::fprintf(stderr,
                     "[kjit warning] KJIT_LOG_LEVEL='%s' is not a level (trace, debug, info, warn, error, critical, "
                     "off): logging stays off\n",
                     env);
    }
    return level;
}

spdlog::logger *make_logger() {
    auto logger = std::make_unique<spdlog::logger>("kjit", std::make_shared<StderrSink>());
    logger->set_pattern("[kjit %L %P:%t] %v");
    logger->set_level(level_from_environment());
    logger->flush_on(spdlog::level::trace);
    return logger.release();
}

std::atomic<spdlog::logger *> logger_slot{nullptr};

void renew_in_forked_child() {
    if (spdlog::logger *logger = logger_slot.load(std::memory_order_relaxed)) {
        static_cast<StderrSink &>(*logger->sinks().front()).renew_lock_in_forked_child();
    }
}
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::logger, renew_in_forked_child);

}  // namespace

spdlog::logger &log() {
    // Leaked on purpose: logging may happen from destructors during exit. No once-guard
    // (fork_guard.hpp).
    return fork_guard::lazy(logger_slot, make_logger);
}

}  // namespace kjit
