#include "raw_nvjitlink.hpp"

#include "support.hpp"

#include <nvJitLink.h>

#include <vector>

namespace kjit_bench {

namespace {

std::string error_log(nvJitLinkHandle h) {
    std::size_t size = 0;
    if (nvJitLinkGetErrorLogSize(h, &size) != NVJITLINK_SUCCESS || size <= 1) return "";
    std::string log(size, '\0');
    if (nvJitLinkGetErrorLog(h, log.data()) != NVJITLINK_SUCCESS) return "";
    return log;
}

// A link handle, destroyed with the object; a failed step fails with the log.
class Link {
public:
    explicit Link(const std::string &arch) {
        const std::string arch_option = "-arch=" + arch;
        const char *options[] = {arch_option.c_str(), "-lto"};
        const nvJitLinkResult r = nvJitLinkCreate(&h_, 2, options);
        if (r != NVJITLINK_SUCCESS) fail("nvJitLinkCreate failed: " + std::to_string(static_cast<int>(r)));
    }
    ~Link() {
        if (h_) nvJitLinkDestroy(&h_);
    }
    Link(const Link &) = delete;
    Link &operator=(const Link &) = delete;
    nvJitLinkHandle get() const { return h_; }
    void check(nvJitLinkResult r, const std::string &what) const {
        if (r != NVJITLINK_SUCCESS) {
            fail(what + " failed: nvJitLink error " + std::to_string(static_cast<int>(r)) + "\n" + error_log(h_));
        }
    }
    // Destroyed now, as part of the timed baseline.
    void destroy() { check(nvJitLinkDestroy(&h_), "nvJitLinkDestroy"); }

private:
    nvJitLinkHandle h_ = nullptr;
};

}  // namespace

std::string nvjitlink_version() {
    unsigned major = 0, minor = 0;
    if (nvJitLinkVersion(&major, &minor) != NVJITLINK_SUCCESS) fail("nvJitLinkVersion failed");
    return std::to_string(major) + "." + std::to_string(minor);
}

std::size_t raw_nvjitlink(const std::string &ltoir, const std::string &library, const std::string &arch) {
    Link link(arch);
    link.check(nvJitLinkAddData(link.get(), NVJITLINK_INPUT_LTOIR, ltoir.data(), ltoir.size(), "source.cu"),
               "nvJitLinkAddData (the kernel's LTO-IR)");
    link.check(nvJitLinkAddFile(link.get(), NVJITLINK_INPUT_LTOIR, library.c_str()),
               "nvJitLinkAddFile '" + library + "'");
    link.check(nvJitLinkComplete(link.get()), "nvJitLinkComplete");
    std::size_t size = 0;
    link.check(nvJitLinkGetLinkedCubinSize(link.get(), &size), "nvJitLinkGetLinkedCubinSize");
    if (size == 0) fail("nvJitLink produced no cubin");
    std::vector<char> cubin(size);
    link.check(nvJitLinkGetLinkedCubin(link.get(), cubin.data()), "nvJitLinkGetLinkedCubin");
    link.destroy();
    return size;
}

}  // namespace kjit_bench
