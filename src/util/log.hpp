// libkjit's logger. Silent unless KJIT_LOG_LEVEL is set (trace, debug, info, warn, error,
// critical, off). The logger is private to libkjit and never registered in spdlog's global
// registry, so a host application that uses spdlog itself is not affected.
#pragma once

#include <spdlog/logger.h>

namespace kjit {

// The library's logger; created on first use from KJIT_LOG_LEVEL. Thread safe.
spdlog::logger &log();

}  // namespace kjit
