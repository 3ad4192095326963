#include "util/status.hpp"

#include <string.h>

namespace kjit {

std::string errno_text(int errnum) {
    char buf[256];
    // GNU strerror_r returns a pointer that may or may not be buf.
    const char *text = strerror_r(errnum, buf, sizeof buf);
    return text ? std::string(text) : std::string("errno ") + std::to_string(errnum);
}

}  // namespace kjit
