#include "compile/linker.hpp"

#include "compile/nvjitlink_library.hpp"
#include "cubin/symbol_scanner.hpp"
#include "util/fork_guard.hpp"
#include "util/hashing.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace kjit::compile::linker {

namespace {

constexpr std::uint64_t kMaxInputBytes = std::uint64_t{1} << 30;

bool starts_with(std::string_view bytes, std::string_view magic) { return bytes.substr(0, magic.size()) == magic; }

// PTX is text whose first directive is .version (after comments and blank lines).
bool looks_like_ptx(std::string_view bytes) {
    std::size_t at = 0;
    while (at < bytes.size()) {
        const char c = bytes[at];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            ++at;
        } else if (bytes.substr(at, 2) == "//") {
            const std::size_t eol = bytes.find('\n', at);
            if (eol == std::string_view::npos) return false;
            at = eol + 1;
        } else {
            return bytes.substr(at, 8) == ".version" && bytes.find('\0') == std::string_view::npos;
        }
    }
    return false;
}

// An ELF file's kind: a CUDA ELF is a cubin, a relocatable host ELF an object (whose device code
// nvJitLink finds in its fatbin section); anything else none.
std::optional<Kind> elf_kind(std::string_view bytes) {
    if (bytes.size() < sizeof(Elf64_Ehdr) || static_cast<unsigned char>(bytes[EI_CLASS]) != ELFCLASS64) {
        return std::nullopt;
    }
    Elf64_Ehdr ehdr;
    std::memcpy(&ehdr, bytes.data(), sizeof ehdr);
    if (ehdr.e_machine == 190) return Kind::cubin;  // EM_CUDA
    if (ehdr.e_type == ET_REL) return Kind::object;
    return std::nullopt;
}

std::optional<Kind> kind_of(std::string_view bytes) {
    // NVVM's LTO-IR container (NVRTC's and nvcc's -dlto output), or bare LLVM bitcode.
    if (starts_with(bytes, std::string_view("\xed\x43\x4e\x7f", 4)) || starts_with(bytes, "BC\xc0\xde")) {
        return Kind::ltoir;
    }
    if (starts_with(bytes, std::string_view("\x50\xed\x55\xba", 4))) return Kind::fatbin;
    if (starts_with(bytes, "!<arch>\n")) return Kind::library;
    if (starts_with(bytes, "\x7f"
                           "ELF")) {
        return elf_kind(bytes);
    }
    if (looks_like_ptx(bytes)) return Kind::ptx;
    return std::nullopt;
}

std::string first_bytes_hex(std::string_view bytes) {
    static const char digits[] = "0123456789abcdef";
    std::string hex;
    for (std::size_t i = 0; i < bytes.size() && i < 8; ++i) {
        const auto b = static_cast<unsigned char>(bytes[i]);
        if (i) hex += ' ';
        hex += digits[b >> 4];
        hex += digits[b & 15];
    }
    return hex;
}

nvJitLinkInputType input_type(Kind kind) {
    switch (kind) {
        case Kind::ltoir: return NVJITLINK_INPUT_LTOIR;
        case Kind::cubin: return NVJITLINK_INPUT_CUBIN;
        case Kind::fatbin: return NVJITLINK_INPUT_FATBIN;
        case Kind::ptx: return NVJITLINK_INPUT_PTX;
        case Kind::object: return NVJITLINK_INPUT_OBJECT;
        case Kind::library: return NVJITLINK_INPUT_LIBRARY;
    }
    return NVJITLINK_INPUT_ANY;
}

const char *result_name(nvJitLinkResult r) {
    static const char *const names[] = {"NVJITLINK_SUCCESS",
                                        "NVJITLINK_ERROR_UNRECOGNIZED_OPTION",
                                        "NVJITLINK_ERROR_MISSING_ARCH",
                                        "NVJITLINK_ERROR_INVALID_INPUT",
                                        "NVJITLINK_ERROR_PTX_COMPILE",
                                        "NVJITLINK_ERROR_NVVM_COMPILE",
                                        "NVJITLINK_ERROR_INTERNAL",
                                        "NVJITLINK_ERROR_THREADPOOL",
                                        "NVJITLINK_ERROR_UNRECOGNIZED_INPUT",
                                        "NVJITLINK_ERROR_FINALIZE",
                                        "NVJITLINK_ERROR_NULL_INPUT",
                                        "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS",
                                        "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE",
                                        "NVJITLINK_ERROR_ARCH_MISMATCH",
                                        "NVJITLINK_ERROR_OUTDATED_LIBRARY",
                                        "NVJITLINK_ERROR_MISSING_FATBIN",
                                        "NVJITLINK_ERROR_UNRECOGNIZED_ARCH",
                                        "NVJITLINK_ERROR_UNSUPPORTED_ARCH",
                                        "NVJITLINK_ERROR_LTO_NOT_ENABLED"};
    const auto i = static_cast<std::size_t>(r);
    return i < sizeof names / sizeof names[0] ? names[i] : "an nvJitLink error";
}

// One nvJitLink handle, destroyed however the link ends.
class Handle {
public:
    explicit Handle(const nvjitlink_library::Api &api) : api_(api) {}
    ~Handle() {
        if (h_) api_.destroy(&h_);
    }
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    nvJitLinkHandle *out() { return &h_; }
    nvJitLinkHandle get() const { return h_; }

    // nvJitLink's error log, trimmed; empty when there is none.
    std::string error_log() const { return log(api_.error_log_size, api_.error_log); }
    std::string info_log() const { return log(api_.info_log_size, api_.info_log); }

private:
    template <typename SizeFn, typename LogFn>
    std::string log(SizeFn size_fn, LogFn log_fn) const {
        std::size_t size = 0;
        if (!h_ || size_fn(h_, &size) != NVJITLINK_SUCCESS || size <= 1) return std::string();
        std::string text(size, '\0');
        if (log_fn(h_, &text[0]) != NVJITLINK_SUCCESS) return std::string();
        while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
        return text;
    }

    const nvjitlink_library::Api &api_;
    nvJitLinkHandle h_ = nullptr;
};

// Why nvJitLink refused input `in` for `arch`: the sm a cubin is for, when it is another.
std::string refusal(const Input &in, const std::string &arch, nvJitLinkResult r, const std::string &log) {
    std::string why =
        "link input '" + in.path + "' (" + kind_name(in.kind) + ") was refused by nvJitLink (" + result_name(r) + ")";
    if (in.kind == Kind::cubin) {
        const unsigned sm = cubin::cubin_sm_version(*in.bytes);
        if (sm != 0 && "sm_" + std::to_string(sm) != arch.substr(0, arch.find_first_not_of("sm_0123456789"))) {
            why += ": it is a cubin for sm_" + std::to_string(sm) + ", and the target is " + arch +
                   " (a cubin links only into its own arch; ship LTO-IR or PTX to link into others)";
        }
    } else if (r == NVJITLINK_ERROR_ARCH_MISMATCH) {
        why += ": it was built for an arch newer than the target " + arch;
    }
    return log.empty() ? why : why + "; nvJitLink's log:\n" + log;
}

}  // namespace

const char *kind_name(Kind kind) {
    switch (kind) {
        case Kind::ltoir: return "LTO-IR";
        case Kind::cubin: return "cubin";
        case Kind::fatbin: return "fatbin";
        case Kind::ptx: return "PTX";
        case Kind::object: return "relocatable object";
        case Kind::library: return "library";
    }
    return "unknown";
}

namespace {

// Link inputs read whole in this process, by path (read_input). The first look-up of each of a
// sweep's kernels linked with one library stats it instead of reading and hashing it again (an
// 8 MB library cost every kernel's first call a full read), while it is the very file that was
// read: the same device, inode, size, and mtime and ctime to the nanosecond, neither of them
// young when it was read (a write within their timestamp's tick would keep all of them, so a
// young file is read again at each call until it is not). The bytes are shared, not copied.
struct ReadInputs {
    std::mutex mutex;
    std::unordered_map<std::string, Input> by_path;
    std::atomic<std::uint64_t> reads{0};
};
constexpr std::size_t kMaxReadInputs = 256;  // when full, all are forgotten

std::atomic<ReadInputs *> read_inputs_slot{nullptr};

ReadInputs &read_inputs() {
    // Leaked: usable during exit. No once-guard (fork_guard.hpp).
    return fork_guard::lazy(read_inputs_slot, [] { return new ReadInputs(); });
}

// A forked child: the lock made anew, and what a thread of the parent may have been changing
// under it forgotten.
void renew_in_forked_child() {
    ReadInputs *r = read_inputs_slot.load(std::memory_order_relaxed);
    if (!r) return;
    fork_guard::renew(r->mutex);
    fork_guard::renew(r->by_path);
}
[[maybe_unused]] const bool fork_handler_registered =
    fork_guard::at_fork_child(fork_guard::State::link_inputs, renew_in_forked_child);

// The input read before at `path` when `st` (a stat of it now) shows it unchanged since.
std::optional<Input> remembered(const std::string &path, const struct stat &st) {
    ReadInputs &r = read_inputs();
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.by_path.find(path);
    if (it == r.by_path.end() || it->second.identity != FileIdentity::from_stat(st)) return std::nullopt;
    return it->second;
}

void remember(const Input &in, std::int64_t read_at_ns) {
    const FileIdentity &id = in.identity;
    if (young_at(id.mtime_sec, id.mtime_nsec, read_at_ns) || young_at(id.ctime_sec, id.ctime_nsec, read_at_ns)) return;
    ReadInputs &r = read_inputs();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.by_path.size() >= kMaxReadInputs && !r.by_path.count(in.path)) r.by_path.clear();
    r.by_path[in.path] = in;
}

}  // namespace

std::uint64_t inputs_read() { return read_inputs().reads.load(std::memory_order_relaxed); }

Result<Input> read_input(const std::string &path) {
    if (struct stat st{}; ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        if (std::optional<Input> known = remembered(path, st)) return std::move(*known);
    }
    const std::int64_t read_at_ns = realtime_ns();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        return Error{Errc::io, "cannot open link input '" + path + "': " + std::strerror(errno)};
    }
    const UniqueFd owned(fd);
    Input in;
    in.path = path;
    auto bytes = read_whole_file(
        fd, path, "link input",
        [&](const struct stat &st) -> Status {
            if (!S_ISREG(st.st_mode)) return Error{Errc::io, "link input '" + path + "' is not a regular file"};
            if (st.st_size == 0) return Error{Errc::invalid_argument, "link input '" + path + "' is empty"};
            if (static_cast<std::uint64_t>(st.st_size) > kMaxInputBytes) {
                return Error{Errc::invalid_argument, "link input '" + path + "' is larger than 1 GiB"};
            }
            return Ok{};
        },
        in.identity);
    if (!bytes) return std::move(bytes).error();
    const auto kind = kind_of(*bytes);
    if (!kind) {
        return Error{Errc::invalid_argument,
                     "link input '" + path + "' is of no kind nvJitLink links (it starts with bytes " +
                         first_bytes_hex(*bytes) +
                         "): give LTO-IR, a cubin, a fatbin, PTX, a relocatable object (.o) or a library (.a)"};
    }
    in.kind = *kind;
    in.content_hash = hash128_hex(*bytes);
    in.bytes = std::make_shared<const std::string>(std::move(*bytes));
    read_inputs().reads.fetch_add(1, std::memory_order_relaxed);
    remember(in, read_at_ns);
    return in;
}

Result<std::string> link(std::string_view ltoir, const std::string &program_name, const std::string &arch,
                         const std::vector<Input> &inputs, const std::vector<std::string> &options,
                         std::string *info_log) {
    KJIT_TRY_ASSIGN(auto api, nvjitlink_library::api());
    const nvjitlink_library::Api &a = *api;
    std::vector<std::string> all = {"-arch=" + arch, "-lto"};
    all.insert(all.end(), options.begin(), options.end());
    std::vector<const char *> argv;
    for (const std::string &o : all) argv.push_back(o.c_str());
    Handle h(a);
    if (const nvJitLinkResult r = a.create(h.out(), static_cast<std::uint32_t>(argv.size()), argv.data());
        r != NVJITLINK_SUCCESS) {
        std::string listed;
        for (const std::string &o : all) listed += (listed.empty() ? "" : " ") + o;
        const std::string log = h.error_log();
        return Error{Errc::link, std::string("nvJitLink refused the link options '") + listed + "' (" + result_name(r) +
                                     ")" + (log.empty() ? "" : ": " + log)};
    }
    if (const nvJitLinkResult r =
            a.add_data(h.get(), NVJITLINK_INPUT_LTOIR, ltoir.data(), ltoir.size(), program_name.c_str());
        r != NVJITLINK_SUCCESS) {
        return Error{Errc::link, "nvJitLink refused NVRTC's LTO-IR of '" + program_name + "' (" + result_name(r) +
                                     "): " + h.error_log()};
    }
    for (const Input &in : inputs) {
        if (const nvJitLinkResult r =
                a.add_data(h.get(), input_type(in.kind), in.bytes->data(), in.bytes->size(), in.path.c_str());
            r != NVJITLINK_SUCCESS) {
            return Error{Errc::link, refusal(in, arch, r, h.error_log())};
        }
    }
    if (const nvJitLinkResult r = a.complete(h.get()); r != NVJITLINK_SUCCESS) {
        std::string names;
        for (const Input &in : inputs) names += (names.empty() ? "'" : ", '") + in.path + "'";
        return Error{Errc::link, "nvJitLink could not link '" + program_name + "' with " + names + " for " + arch +
                                     " (" + result_name(r) + "); nvJitLink's log:\n" + h.error_log()};
    }
    std::size_t size = 0;
    if (a.linked_cubin_size(h.get(), &size) != NVJITLINK_SUCCESS || size == 0) {
        return Error{Errc::link, "nvJitLink linked '" + program_name + "' but gave no cubin: " + h.error_log()};
    }
    std::string cubin(size, '\0');
    if (const nvJitLinkResult r = a.linked_cubin(h.get(), &cubin[0]); r != NVJITLINK_SUCCESS) {
        return Error{Errc::link,
                     std::string("nvJitLink could not hand over the linked cubin (") + result_name(r) + ")"};
    }
    if (info_log) *info_log = h.info_log();
    return cubin;
}

}  // namespace kjit::compile::linker
