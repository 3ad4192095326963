/**
 * @file kjit.hpp
 * @brief libkjit's header-only C++17 companion: NVRTC's spelling of C++ types
 *        (kjit::type_name()), name expressions built from types and values
 *        (kjit::instantiate()), and RAII owners and throwing wrappers of the C ABI of kjit.h
 *        (since 0.14).
 *
 * What jitify2's `jitify2::reflection` gives its users (`Template("k").instantiate(type_of(x),
 * 64)`, `reflect<T>()`), on top of libkjit's C ABI: docs/jitify2.md maps one to the other.
 *
 * @code{.cpp}
 * #include <kjit/kjit.hpp>
 *
 * kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
 * const std::string expr = kjit::instantiate("scale", kjit::type<float>, 64);  // "scale<float, 64>"
 * opts.name_expression = expr.c_str();
 * kjit::Kernel kernel = kjit::compile_and_load(source, "scale", &opts);        // throws kjit::Error
 * @endcode
 *
 * @par What it is, and is not
 *  - Header only, C++17, with no dependency beyond kjit.h and the C++ standard library (and
 *    `<cxxabi.h>` of GCC's and Clang's C++ runtimes, for kjit::type_name()). Include it instead
 *    of, or beside, kjit.h.
 *  - Not part of the C ABI: everything here is inline code compiled into the caller, over the
 *    exported `kjit_*` functions; libkjit.so exports nothing for it and its ABI does not depend
 *    on it (docs/abi-policy.md). Its API follows the project's version, as the Python package's
 *    does.
 *  - GCC or Clang (the Itanium C++ ABI's `abi::__cxa_demangle`), with RTTI for
 *    kjit::type_name() and what uses it (`-fno-rtti` makes those a compile error).
 *
 * @par Errors
 *  Every wrapper of a libkjit call throws kjit::Error on failure, carrying the ::kjit_status and
 *  the text of kjit_last_error() read right after the failing call, on the same thread.
 *  std::bad_alloc may come from the strings they build.
 *
 * @par Threads
 *  Every free function here may be called from any number of threads at once, as the C
 *  functions they wrap. A kjit::Kernel or kjit::BatchResult object is as a standard container:
 *  its const members may be used from many threads at once, its non-const ones (moves,
 *  reset(), release(), destruction) by one thread at a time.
 */
#ifndef KJIT_KJIT_HPP
#define KJIT_KJIT_HPP

#include <kjit/kjit.h>

#include <cxxabi.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

/** @brief libkjit's C++ companion (kjit.hpp). */
namespace kjit {

/**
 * @brief A failed libkjit call (or kjit::type_name()), as an exception.
 *
 * `what()` is "<call>: <kjit_status_string(status)>: <detail>" (without ": <detail>" when the
 * detail is empty), e.g. "kjit_load_cached: driver error: cuLibraryLoadData failed: ...".
 */
class Error : public std::runtime_error {
public:
    /**
     * @brief An error of `call` with `status` and its detail text.
     * @param[in] status The failure's status (not #KJIT_OK).
     * @param[in] call   What failed, e.g. "kjit_compile"; only used in what().
     * @param[in] detail The detail text (kjit_last_error()'s, copied), may be empty.
     * @throws std::bad_alloc
     */
    Error(kjit_status status, const std::string &call, std::string detail)
        : std::runtime_error(call + ": " + kjit_status_string(status) + (detail.empty() ? "" : ": " + detail)),
          status_(status), detail_(std::make_shared<const std::string>(std::move(detail))) {}

    /**
     * @brief The error of the calling thread's last failed libkjit call: `status`, and
     *        kjit_last_error() copied now. Call it right after the call that failed.
     * @param[in] status The status the call returned.
     * @param[in] call   The call's name, for what().
     * @return The error, to throw.
     */
    static Error last(kjit_status status, const std::string &call) { return Error(status, call, kjit_last_error()); }

    /** @brief The failure's status, e.g. #KJIT_ERROR_COMPILE. @return The status. */
    kjit_status status() const noexcept { return status_; }

    /**
     * @brief The detail text alone (kjit_last_error()'s at the failure: the NVRTC log, the
     *        candidates of an ambiguous keyword, the driver's message).
     * @return The text, owned by the error (shared by its copies); may be empty.
     */
    const std::string &detail() const noexcept { return *detail_; }

private:
    kjit_status status_;
    std::shared_ptr<const std::string> detail_;  // shared: copying an exception must not throw
};

/// @cond KJIT_DETAIL
namespace detail {

template <typename T>
struct type_name_wrapper {};

[[noreturn]] inline void fail(kjit_status status, const char *call) { throw Error::last(status, call); }

inline void check(kjit_status status, const char *call) {
    if (status != KJIT_OK) fail(status, call);
}

/* abi::__cxa_demangle's text of a std::type_info's name, as nvrtc.h's nvrtcGetTypeName(const
   std::type_info &, std::string *) gives it. */
inline std::string demangle(const char *mangled) {
    int status = 0;
    std::unique_ptr<char, void (*)(void *)> text(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
    if (status == 0 && text) return text.get();
    if (status == -1) throw Error(KJIT_ERROR_OUT_OF_MEMORY, "kjit::type_name", "abi::__cxa_demangle ran out of memory");
    throw Error(KJIT_ERROR_INTERNAL, "kjit::type_name",
                "abi::__cxa_demangle failed (status " + std::to_string(status) + ") on the type name '" + mangled +
                    "'; NVRTC's nvrtcGetTypeName fails on it too");
}

}  // namespace detail
/// @endcond

/**
 * @brief The name NVRTC's own `nvrtcGetTypeName<T>()` (nvrtc.h, with NVRTC_GET_TYPE_NAME set)
 *        gives `T`, without nvrtc.h and without loading NVRTC: the text to put in a name
 *        expression or in generated source, e.g. "float", "unsigned long", "__half",
 *        "ns::Tile<float, 64>", "float const*".
 *
 * As nvrtcGetTypeName<T>() does, it demangles (abi::__cxa_demangle) the `typeid` of a template
 * instantiated on `T` and takes `T`'s part of the text. So the spelling is the demangler's:
 * `std::int64_t` is "long" on Linux (the type it names), `const float *` is "float const*",
 * `unsigned int` is "unsigned int", default template arguments are spelled out
 * ("std::vector<int, std::allocator<int> > "), and NVRTC accepts all of these as C++. A class
 * template's specialization ends in a blank, "ns::Tile<float, 64> ", exactly as from
 * nvrtcGetTypeName (the demangler closes the wrapper with "> >" and NVRTC cuts at the last '>');
 * kept so that the text is NVRTC's byte for byte (C++ ignores the blank).
 *
 * Top-level cv-qualifiers and references: kept, as nvrtcGetTypeName<T>() keeps them (it wraps
 * `T` in a template first, precisely because `typeid(T)` alone would drop them):
 * type_name<const int>() is "int const", type_name<float &>() is "float&". Pass the plain type
 * (or use kjit::type_of(), which drops them) when the kernel's parameter is a plain type.
 *
 * Types with no name C++ code can spell (a lambda's closure, a local class, a class in an
 * unnamed namespace) get the demangler's description ("main::{lambda()#1}",
 * "(anonymous namespace)::Tile"), as from NVRTC; such text does not compile.
 *
 * @tparam T Any type (complete or not, cv-qualified, a reference, an array, a function type).
 * @return The spelling. The demangled name is computed on every call (a few hundred
 *         nanoseconds): keep it if it is asked in a hot loop.
 * @throws kjit::Error #KJIT_ERROR_INTERNAL, naming the mangled text, when abi::__cxa_demangle
 *         fails (where nvrtcGetTypeName returns NVRTC_ERROR_INTERNAL_ERROR);
 *         #KJIT_ERROR_OUT_OF_MEMORY when it runs out of memory. std::bad_alloc.
 * @note Thread safe. Needs RTTI.
 */
template <typename T>
std::string type_name() {
    const std::string wrapped = detail::demangle(typeid(detail::type_name_wrapper<T>).name());
    static constexpr char kWrapper[] = "type_name_wrapper<";
    const std::size_t open = wrapped.find(kWrapper);
    const std::size_t close = wrapped.find_last_of('>');
    if (open == std::string::npos || close == std::string::npos || close < open + sizeof kWrapper - 1) {
        throw Error(KJIT_ERROR_INTERNAL, "kjit::type_name", "unexpected demangled text '" + wrapped + "'");
    }
    const std::size_t begin = open + sizeof kWrapper - 1;
    return wrapped.substr(begin, close - begin);
}

/**
 * @brief A type passed to kjit::instantiate() as a compile-time tag: `kjit::type<float>`, or
 *        what kjit::type_of() returns. Spelled with kjit::type_name<T>() there.
 * @tparam T The type.
 */
template <typename T>
struct type_tag {
    /** @brief The type. */
    using type = T;
};

/** @brief The tag of `T`: `kjit::instantiate("k", kjit::type<float>)` is "k<float>". */
template <typename T>
inline constexpr type_tag<T> type{};

/**
 * @brief The tag of a value's type, for kjit::instantiate() (jitify2's `type_of`).
 *
 * The type is the one template deduction gives a `const T &` parameter: top-level const (and
 * the reference) dropped, so a `const float` variable gives "float" and a `const float *`
 * pointer "float const*" (the pointee's const is part of the type). jitify2's `type_of` keeps
 * the const of a const value ("float const"), which names another instantiation than "float";
 * write `kjit::type<const float>` where that is meant.
 * @param[in] value Any value; only its type is used.
 * @return The tag of its type.
 * @note Thread safe.
 */
template <typename T>
constexpr type_tag<T> type_of(const T &value) noexcept {
    static_cast<void>(value);
    return {};
}

/**
 * @brief A type given by its spelling at run time (as from a table of kernels, or Python's
 *        kjit.c_type()), for kjit::instantiate(). Its text is used exactly as given.
 */
class Type {
public:
    /**
     * @brief A type spelled `spelling`, e.g. "__half" or "ns::Tile<float, 64>".
     * @param[in] spelling The C++ text of the type; not checked here (NVRTC checks it).
     */
    explicit Type(std::string spelling) : name_(std::move(spelling)) {}

    /**
     * @brief The type `T`, spelled by kjit::type_name<T>().
     * @return The type.
     * @throws kjit::Error As kjit::type_name().
     */
    template <typename T>
    static Type of() {
        return Type(type_name<T>());
    }

    /** @brief The spelling. @return The text, owned by this object. */
    const std::string &name() const noexcept { return name_; }

private:
    std::string name_;
};

/// @cond KJIT_DETAIL
namespace detail {

template <typename T>
inline constexpr bool dependent_false = false;

/* The literal suffix that gives an integer literal the type T, for the types that have one. */
template <typename T>
constexpr const char *integer_suffix() {
    if constexpr (std::is_same_v<T, int>) return "";
    else if constexpr (std::is_same_v<T, unsigned int>) return "u";
    else if constexpr (std::is_same_v<T, long>) return "l";
    else if constexpr (std::is_same_v<T, unsigned long>) return "ul";
    else if constexpr (std::is_same_v<T, long long>) return "ll";
    else if constexpr (std::is_same_v<T, unsigned long long>) return "ull";
    else return nullptr;
}

/* An integer value as a C++ expression of exactly type T. */
template <typename T>
std::string integer_argument(T value) {
    static_assert(sizeof(T) <= sizeof(long long), "kjit::instantiate: integers wider than 64 bits are not supported");
    const std::string digits = std::is_signed_v<T> ? std::to_string(static_cast<long long>(value))
                                                   : std::to_string(static_cast<unsigned long long>(value));
    constexpr const char *suffix = integer_suffix<T>();
    if constexpr (suffix == nullptr) {
        // char, signed/unsigned char, short, wchar_t, char16_t, ...: no literal has the type.
        return "(" + type_name<T>() + ")" + digits;
    } else {
        if constexpr (std::is_signed_v<T>) {
            // The literal of the lowest value does not fit its type (-2147483648 is a long).
            if (value == std::numeric_limits<T>::min()) {
                return "(" + std::to_string(static_cast<long long>(value) + 1) + suffix + " - 1)";
            }
        }
        return digits + suffix;
    }
}

template <typename T>
std::string template_argument(const type_tag<T> &) {
    return type_name<T>();
}

inline std::string template_argument(const Type &type) { return type.name(); }

template <typename T>
std::string template_argument(const T &value) {
    if constexpr (std::is_convertible_v<const T &, std::string_view>) {
        return std::string(std::string_view(value));
    } else if constexpr (std::is_same_v<T, bool>) {
        return value ? "true" : "false";
    } else if constexpr (std::is_integral_v<T>) {
        return integer_argument<T>(value);
    } else if constexpr (std::is_enum_v<T>) {
        using Underlying = std::underlying_type_t<T>;
        return "(" + type_name<T>() + ")" + integer_argument<Underlying>(static_cast<Underlying>(value));
    } else {
        static_assert(dependent_false<T>,
                      "kjit::instantiate takes types (kjit::type<T>, kjit::type_of(x), kjit::Type), integers, bool, "
                      "enums and strings of C++ text");
        return {};
    }
}

}  // namespace detail
/// @endcond

/**
 * @brief A name expression for kernel template `name` instantiated on `args`, e.g.
 *        `instantiate("gemm", kjit::type<__half>, 128, true)` is "gemm<__half, 128, true>":
 *        what kjit_compile_options::name_expression takes (NVRTC's nvrtcAddNameExpression).
 *
 * Each argument, in order, separated by ", ":
 *  - a type: `kjit::type<T>`, `kjit::type_of(x)` or a kjit::Type, spelled by
 *    kjit::type_name() (or as the kjit::Type holds it);
 *  - `bool`: "true" or "false";
 *  - an integer, as an expression of exactly its type, so that a template parameter declared
 *    `auto` deduces the type the host code has, and one of a given type converts it: `int`
 *    "64", `unsigned` "64u", `long` (std::int64_t on Linux) "64l", `unsigned long` "64ul",
 *    `long long` "64ll", `unsigned long long` "64ull"; the types no literal has, as a cast:
 *    `(short)-3`, `(unsigned char)200`, `(char)97` (characters are integers here, never 'a');
 *    a signed type's lowest value as "(-2147483647 - 1)" (its literal would not fit);
 *  - an enum: a cast of its value, "(" + kjit::type_name<E>() + ")" and its underlying value
 *    as above, e.g. "(ns::Layout)1"; valid for scoped and unscoped enums;
 *  - a string (`const char *`, std::string, std::string_view): C++ text, used as it is
 *    (as jitify2's reflection uses strings), e.g. "Tile<64, 64>" or "sizeof(float)".
 * Floating-point values, pointers and other types are refused at compile time.
 * @param[in] name The template's name, e.g. "gemm" or "ns::gemm" (used as it is).
 * @param[in] args The template arguments.
 * @return "name<arg, ...>".
 * @throws kjit::Error As kjit::type_name(). std::bad_alloc.
 * @note Thread safe.
 */
template <typename... Args>
std::string instantiate(const std::string &name, const Args &...args) {
    std::string expression = name + "<";
    bool first = true;
    ((expression += (first ? "" : ", ") + detail::template_argument(args), first = false), ...);
    return expression + ">";
}

/**
 * @brief The name expression of template `name` with no arguments: "name<>", for a kernel
 *        template whose every parameter has a default. (A kernel that is not a template needs
 *        no name expression: its keyword finds it.)
 * @param[in] name The template's name.
 * @return "name<>".
 * @throws std::bad_alloc
 * @note Thread safe.
 */
inline std::string instantiate(const std::string &name) { return name + "<>"; }

/// @cond KJIT_DETAIL
namespace detail {

/* What kjit::Kernel, kjit::BatchResult and kjit::Prepared share: sole ownership of one libkjit
   handle, released with `Release` once (when destroyed or reset), move-only, a moved-from owner
   empty. Their documented members get(), operator bool, release() and reset() are these. */
template <typename T, void (*Release)(T *)>
class Owner {
public:
    Owner() noexcept = default;
    explicit Owner(T *handle) noexcept : handle_(handle) {}
    Owner(Owner &&other) noexcept : handle_(other.release()) {}
    Owner &operator=(Owner &&other) noexcept {
        if (this != &other) reset(other.release());
        return *this;
    }
    Owner(const Owner &) = delete;
    Owner &operator=(const Owner &) = delete;
    ~Owner() { Release(handle_); }

    /** @brief The handle, still owned by this object. @return It, or NULL when empty. */
    T *get() const noexcept { return handle_; }
    /** @brief Whether a handle is held. @return true when not empty. */
    explicit operator bool() const noexcept { return handle_ != nullptr; }
    /**
     * @brief Gives up ownership without releasing.
     * @return The handle (the caller now releases it with the C release function), or NULL.
     */
    T *release() noexcept { return std::exchange(handle_, nullptr); }
    /**
     * @brief Releases the handle held (if any) and takes `handle`.
     * @param[in] handle The new handle, or NULL to become empty.
     */
    void reset(T *handle = nullptr) noexcept { Release(std::exchange(handle_, handle)); }

protected:
    T *handle_ = nullptr;
};

}  // namespace detail
/// @endcond

/**
 * @brief Owns a ::kjit_kernel: kjit_kernel_release() runs once, when the owner is destroyed or
 *        reset. Move-only; a moved-from Kernel is empty.
 */
class Kernel : public detail::Owner<kjit_kernel, kjit_kernel_release> {
public:
    /**
     * @brief An empty owner, or the owner of `handle` (from kjit_load_cached() or
     *        kjit_compile_and_load()); get(), operator bool, release() and reset() as their names say.
     */
    using Owner::Owner;

    /**
     * @brief The kernel's mangled name (kjit_kernel_name()).
     * @return A copy; "" when empty.
     */
    std::string name() const { return handle_ ? kjit_kernel_name(handle_) : std::string(); }
    /**
     * @brief The cubin it was loaded from (kjit_kernel_cubin_path()).
     * @return A copy; "" when empty.
     */
    std::string cubin_path() const { return handle_ ? kjit_kernel_cubin_path(handle_) : std::string(); }
    /**
     * @brief The driver's `CUkernel` (kjit_kernel_cukernel(); cast it), owned by libkjit and
     *        valid while this object holds the handle.
     * @return It; NULL when empty (and in a forked child for a handle the parent loaded).
     */
    void *cukernel() const noexcept { return kjit_kernel_cukernel(handle_); }
    /**
     * @brief The `CUlibrary` it belongs to (kjit_kernel_culibrary(); cast it).
     * @return It; NULL when empty (and in a forked child for a handle the parent loaded).
     */
    void *culibrary() const noexcept { return kjit_kernel_culibrary(handle_); }
    /**
     * @brief The `CUfunction` in the calling thread's current context (kjit_kernel_cufunction();
     *        cast it), owned by the driver.
     * @return It.
     * @throws kjit::Error #KJIT_ERROR_INVALID_ARGUMENT when empty, #KJIT_ERROR_DRIVER with no
     *         current context.
     */
    void *cufunction() const {
        void *function = nullptr;
        detail::check(kjit_kernel_cufunction(handle_, &function), "kjit_kernel_cufunction");
        return function;
    }
};

/**
 * @brief Owns a ::kjit_batch_result: kjit_batch_result_release() runs once, when the owner is
 *        destroyed or reset. Move-only; a moved-from BatchResult is empty (count() 0).
 */
class BatchResult : public detail::Owner<kjit_batch_result, kjit_batch_result_release> {
public:
    /**
     * @brief An empty owner, or the owner of `result` (from kjit_compile_batch()); get(),
     *        operator bool, release() and reset() as their names say.
     */
    using Owner::Owner;

    /** @brief Number of items (kjit_batch_result_count()). @return It; 0 when empty. */
    std::size_t count() const noexcept { return kjit_batch_result_count(handle_); }
    /**
     * @brief One item's status (kjit_batch_result_status()).
     * @param[in] index The item's index in the request array.
     * @return #KJIT_OK or the item's failure.
     * @throws std::out_of_range For an index not below count() (also when empty).
     */
    kjit_status status(std::size_t index) const { return kjit_batch_result_status(handle_, checked(index)); }
    /**
     * @brief One item's cubin path (kjit_batch_result_cubin_path()).
     * @param[in] index The item's index.
     * @return A copy; "" for an item that failed.
     * @throws std::out_of_range For an index not below count().
     */
    std::string cubin_path(std::size_t index) const {
        return text(kjit_batch_result_cubin_path(handle_, checked(index)));
    }
    /**
     * @brief One item's mangled kernel name (kjit_batch_result_kernel_name()).
     * @param[in] index The item's index.
     * @return A copy; "" for an item that failed.
     * @throws std::out_of_range For an index not below count().
     */
    std::string kernel_name(std::size_t index) const {
        return text(kjit_batch_result_kernel_name(handle_, checked(index)));
    }
    /**
     * @brief One item's error text (kjit_batch_result_error()): the whole NVRTC log for a
     *        compile error.
     * @param[in] index The item's index.
     * @return A copy; "" for an item that succeeded.
     * @throws std::out_of_range For an index not below count().
     */
    std::string error(std::size_t index) const { return text(kjit_batch_result_error(handle_, checked(index))); }

private:
    std::size_t checked(std::size_t index) const {
        if (index >= count()) {
            throw std::out_of_range("kjit::BatchResult: index " + std::to_string(index) + " of " +
                                    std::to_string(count()) + " items");
        }
        return index;
    }
    static std::string text(const char *s) { return s ? s : std::string(); }
};

/** @brief What kjit::compile_named() returns: the cached cubin and the kernel's mangled name. */
struct Compiled {
    std::string cubin_path;  /**< The cached cubin's absolute path. */
    std::string kernel_name; /**< The kernel's mangled name in it. */
};

/// @cond KJIT_DETAIL
namespace detail {

/* Calls `call(buffer, size, &length)` under kjit.h's buffer convention, growing the buffer to
   the reported length while the answer is KJIT_ERROR_BUFFER_TOO_SMALL. */
template <typename Call>
std::string out_string(const char *what, Call call) {
    std::string buffer(512, '\0');
    for (int attempt = 0;; ++attempt) {
        std::size_t length = 0;
        const kjit_status status = call(&buffer[0], buffer.size(), &length);
        if (status == KJIT_OK) {
            buffer.resize(length);
            return buffer;
        }
        if (status != KJIT_ERROR_BUFFER_TOO_SMALL || attempt == 8) fail(status, what);
        buffer.assign(length >= buffer.size() ? length + 1 : 2 * buffer.size(), '\0');
    }
}

/* Calls `call(path, path_size, &path_length, name, name_size, &name_length)` under kjit.h's
   buffer convention (kjit_compile_named's), growing both buffers while the answer is
   KJIT_ERROR_BUFFER_TOO_SMALL. */
template <typename Call>
Compiled out_named(const char *what, Call call);

}  // namespace detail
/// @endcond

/**
 * @brief kjit_compile(): compiles `source` into the cache, or finds it there.
 * @param[in] source  CUDA C++ source (up to its first NUL).
 * @param[in] keyword The kernel, as for kjit_resolve_name().
 * @param[in] options NULL for all defaults, else options with struct_size set (e.g.
 *                    #KJIT_COMPILE_OPTIONS_INIT; name_expression from kjit::instantiate()).
 * @return The cached cubin's absolute path.
 * @throws kjit::Error With kjit_compile()'s status and text (#KJIT_ERROR_COMPILE with the NVRTC
 *         log, ...). std::bad_alloc.
 * @note Thread safe, as kjit_compile().
 */
inline std::string compile(const std::string &source, const std::string &keyword,
                           const kjit_compile_options *options = nullptr) {
    return detail::out_string("kjit_compile", [&](char *buffer, std::size_t size, std::size_t *length) {
        return kjit_compile(source.c_str(), keyword.c_str(), options, buffer, size, length);
    });
}

/**
 * @brief kjit_compile_named(): kjit::compile(), and the kernel's mangled name from the same
 *        look-up.
 * @param[in] source, keyword, options As for kjit::compile().
 * @return The cubin's path and the kernel's name.
 * @throws kjit::Error With kjit_compile_named()'s status and text. std::bad_alloc.
 * @note Thread safe.
 */
inline Compiled compile_named(const std::string &source, const std::string &keyword,
                              const kjit_compile_options *options = nullptr) {
    return detail::out_named("kjit_compile_named", [&](char *path, std::size_t path_size, std::size_t *path_length,
                                                       char *name, std::size_t name_size, std::size_t *name_length) {
        return kjit_compile_named(source.c_str(), keyword.c_str(), options, path, path_size, path_length, name,
                                  name_size, name_length);
    });
}

/// @cond KJIT_DETAIL
template <typename Call>
Compiled detail::out_named(const char *what, Call call) {
    Compiled out{std::string(512, '\0'), std::string(256, '\0')};
    for (int attempt = 0;; ++attempt) {
        std::size_t path_length = 0, name_length = 0;
        const kjit_status status = call(&out.cubin_path[0], out.cubin_path.size(), &path_length, &out.kernel_name[0],
                                        out.kernel_name.size(), &name_length);
        if (status == KJIT_OK) {
            out.cubin_path.resize(path_length);
            out.kernel_name.resize(name_length);
            return out;
        }
        if (status != KJIT_ERROR_BUFFER_TOO_SMALL || attempt == 8) fail(status, what);
        out.cubin_path.assign(std::max(path_length + 1, out.cubin_path.size()), '\0');
        out.kernel_name.assign(std::max(name_length + 1, out.kernel_name.size()), '\0');
    }
}
/// @endcond

/**
 * @brief kjit_resolve_name(): the mangled name of kernel `keyword` in a cubin.
 * @param[in] cubin_path The cubin.
 * @param[in] keyword    The kernel, as for kjit_resolve_name().
 * @return The mangled name.
 * @throws kjit::Error With kjit_resolve_name()'s status and text (#KJIT_ERROR_AMBIGUOUS with the
 *         candidates, ...). std::bad_alloc.
 * @note Thread safe.
 */
inline std::string resolve_name(const std::string &cubin_path, const std::string &keyword) {
    return detail::out_string("kjit_resolve_name", [&](char *buffer, std::size_t size, std::size_t *length) {
        return kjit_resolve_name(cubin_path.c_str(), keyword.c_str(), buffer, size, length);
    });
}

/**
 * @brief kjit_load_cached(): loads kernel `keyword` of a cubin through the CUDA driver.
 * @param[in] cubin_path The cubin (e.g. from kjit::compile()).
 * @param[in] keyword    The kernel, as for kjit_resolve_name().
 * @return The kernel, owned by the returned object.
 * @throws kjit::Error With kjit_load_cached()'s status and text
 *         (#KJIT_ERROR_DRIVER_UNAVAILABLE without a driver, #KJIT_ERROR_DRIVER with the driver's
 *         message, ...).
 * @note Thread safe.
 */
inline Kernel load_cached(const std::string &cubin_path, const std::string &keyword) {
    kjit_kernel *handle = nullptr;
    detail::check(kjit_load_cached(cubin_path.c_str(), keyword.c_str(), &handle), "kjit_load_cached");
    return Kernel(handle);
}

/**
 * @brief kjit_compile_and_load(): kjit::compile() then kjit::load_cached() in one call; a
 *        repeat while a handle to the kernel is alive costs no file read and no driver call.
 * @param[in] source, keyword, options As for kjit::compile().
 * @return The kernel, owned by the returned object.
 * @throws kjit::Error With kjit_compile_and_load()'s status and text: the compile's failure or
 *         the load's.
 * @note Thread safe.
 */
inline Kernel compile_and_load(const std::string &source, const std::string &keyword,
                               const kjit_compile_options *options = nullptr) {
    kjit_kernel *handle = nullptr;
    detail::check(kjit_compile_and_load(source.c_str(), keyword.c_str(), options, &handle), "kjit_compile_and_load");
    return Kernel(handle);
}

/**
 * @brief A prepared request (kjit_prepare(), since 0.14), owned: the request checked, copied
 *        and hashed once, each use then answered without hashing it again (still proven
 *        current, as every repeat is). Move-only; released (kjit_prepared_release()) with it.
 *
 * @code{.cpp}
 * kjit::Prepared gemm(source, "gemm", &opts);   // opts and its strings may go after this
 * kjit::Compiled c = gemm.compile_named();      // at each launch: path and name
 * @endcode
 *
 * Thread safety: its const members (every call) may be used from any number of threads at
 * once; moves, reset() and destruction by one thread at a time, after the last call.
 */
class Prepared : public detail::Owner<kjit_prepared, kjit_prepared_release> {
public:
    /**
     * @brief An empty owner, or the owner of `handle` (from kjit_prepare()); get(), operator
     *        bool, release() and reset() as their names say.
     */
    using Owner::Owner;
    /**
     * @brief kjit_prepare(): the request checked, copied, its defaults settled now.
     * @param[in] source, keyword, options As for kjit::compile(); copied.
     * @throws kjit::Error With kjit_prepare()'s status and text (#KJIT_ERROR_INVALID_ARGUMENT
     *         naming the option that is wrong, ...). std::bad_alloc.
     */
    Prepared(const std::string &source, const std::string &keyword, const kjit_compile_options *options = nullptr) {
        detail::check(kjit_prepare(source.c_str(), keyword.c_str(), options, &handle_), "kjit_prepare");
    }

    /**
     * @brief kjit_prepared_compile(): the cubin's path and the kernel's name, compiled on a miss.
     * @return Both.
     * @throws kjit::Error With kjit_prepared_compile()'s status and text
     *         (#KJIT_ERROR_INVALID_ARGUMENT when empty, #KJIT_ERROR_COMPILE with the log, ...).
     * @note Thread safe.
     */
    Compiled compile_named() const {
        return detail::out_named("kjit_prepared_compile", [&](char *path, std::size_t path_size,
                                                              std::size_t *path_length, char *name,
                                                              std::size_t name_size, std::size_t *name_length) {
            return kjit_prepared_compile(handle_, path, path_size, path_length, name, name_size, name_length);
        });
    }
    /**
     * @brief The cubin's path alone (kjit_prepared_compile() without the name).
     * @return The path.
     * @throws kjit::Error As compile_named().
     * @note Thread safe.
     */
    std::string compile() const {
        return detail::out_string("kjit_prepared_compile", [&](char *buffer, std::size_t size, std::size_t *length) {
            return kjit_prepared_compile(handle_, buffer, size, length, nullptr, 0, nullptr);
        });
    }
    /**
     * @brief kjit_prepared_load(): its kernel, compiled on a miss, loaded.
     * @return The kernel, owned by the returned object.
     * @throws kjit::Error With kjit_prepared_load()'s status and text.
     * @note Thread safe.
     */
    Kernel load() const {
        kjit_kernel *kernel = nullptr;
        detail::check(kjit_prepared_load(handle_, &kernel), "kjit_prepared_load");
        return Kernel(kernel);
    }
};

/**
 * @brief kjit_compile_batch(): compiles many requests at once.
 *
 * Items that fail do not make it throw: each item's status and text are in the result (and the
 * batch's overall status, kjit_compile_batch()'s return value, in `*batch_status` when given).
 * @param[in]  requests     The requests (pointers; none retained).
 * @param[in]  options      NULL for all defaults, else batch options with struct_size set.
 * @param[out] batch_status If not NULL, receives kjit_compile_batch()'s return value.
 * @return The per-item results.
 * @throws kjit::Error When the call itself was refused (no result: a bad options struct, too
 *         many requests, out of memory).
 * @note Thread safe.
 */
inline BatchResult compile_batch(const std::vector<const kjit_compile_request *> &requests,
                                 const kjit_batch_options *options = nullptr, kjit_status *batch_status = nullptr) {
    kjit_batch_result *result = nullptr;
    const kjit_status status = kjit_compile_batch(requests.data(), requests.size(), options, &result);
    if (result == nullptr && status != KJIT_OK) detail::fail(status, "kjit_compile_batch");
    if (batch_status != nullptr) *batch_status = status;
    return BatchResult(result);
}

}  // namespace kjit

#endif /* KJIT_KJIT_HPP */
