#include "log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>

namespace kjit {

namespace {

std::unique_ptr<spdlog::logger> make_logger() {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto logger = std::make_unique<spdlog::logger>("kjit", std::move(sink));
    logger->set_pattern("[kjit %L %P:%t] %v");
    const char *env = std::getenv("KJIT_LOG_LEVEL");
    // from_str maps unknown text to "off", which is also the default.
    logger->set_level(env ? spdlog::level::from_str(env) : spdlog::level::off);
    logger->flush_on(spdlog::level::trace);
    return logger;
}

}  // namespace

spdlog::logger &log() {
    // Leaked on purpose: logging may happen from destructors during exit.
    static spdlog::logger *const logger = make_logger().release();
    return *logger;
}

}  // namespace kjit
