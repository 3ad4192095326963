// Internal error type shared by every module. Modules report failures as an Error (a code
// plus a message naming the file and what was wrong); only the C ABI (api/c_api_*.cpp) maps
// codes to the public kjit_status values, so no module below the C ABI knows the C types.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace kjit {

// Same meanings (and, checked in api/c_api_support.cpp, the same values) as the public kjit_status.
enum class Errc {
    invalid_argument = 1,
    not_found = 2,
    ambiguous = 3,
    bad_cubin = 4,
    io = 5,
    compile = 6,
    nvrtc = 7,
    driver_unavailable = 8,
    driver = 9,
    buffer_too_small = 10,
    out_of_memory = 11,
    internal = 12,
    cancelled = 13,
    link = 14,        // nvJitLink refused a link, or none could be loaded
    not_cached = 15,  // a miss where compiling is refused (a serving process's strict mode)
};

struct Error {
    Errc code;
    std::string message;
    // The errno of the system call that failed, where one did and the caller may act on it
    // (ENOSPC, EDQUOT: the cache makes room under a size limit); 0 otherwise.
    int sys_errno = 0;
};

// A value or an Error. Small stand-in for C++23's std::expected.
template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
    Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

    bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }
    T &value() & { return std::get<0>(v_); }
    const T &value() const & { return std::get<0>(v_); }
    T &&value() && { return std::get<0>(std::move(v_)); }
    T &operator*() & { return value(); }
    const T &operator*() const & { return value(); }
    T *operator->() { return &value(); }
    const T *operator->() const { return &value(); }
    const Error &error() const & { return std::get<1>(v_); }
    Error &&error() && { return std::get<1>(std::move(v_)); }

private:
    std::variant<T, Error> v_;
};

// Result of an operation that yields nothing but success or an Error.
struct Ok {};
using Status = Result<Ok>;

// KJIT_TRY(expr): evaluates `expr`, a Result or Status; when it holds an error, returns that
// error from the enclosing function (which returns a Result or Status of any type): the one
// spelling of "pass the failure up".
#define KJIT_TRY(...)                                                      \
    do {                                                                   \
        auto &&kjit_try_result_ = (__VA_ARGS__);                           \
        if (!kjit_try_result_) return std::move(kjit_try_result_).error(); \
    } while (0)

// KJIT_TRY_ASSIGN(declaration, expr): evaluates `expr`, a Result<T>; when it holds an error,
// returns that error from the enclosing function, else moves its value into `declaration` (a
// new variable, `auto x` or `const auto x`, or an lvalue), which then is a T, not a Result.
#define KJIT_TRY_ASSIGN(declaration, ...) \
    KJIT_TRY_ASSIGN_IMPL_(KJIT_TRY_CONCAT_(kjit_try_value_, __LINE__), declaration, __VA_ARGS__)
#define KJIT_TRY_CONCAT_(a, b) KJIT_TRY_CONCAT_IMPL_(a, b)
#define KJIT_TRY_CONCAT_IMPL_(a, b) a##b
#define KJIT_TRY_ASSIGN_IMPL_(result, declaration, ...) \
    auto result = (__VA_ARGS__);                        \
    if (!result) return std::move(result).error();      \
    declaration = std::move(result).value()

// "strerror(errnum)" that is thread safe.
std::string errno_text(int errnum);

}  // namespace kjit
