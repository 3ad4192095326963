// The kernel loader against the CUDA driver test double (KJIT_LIBCUDA points at it).
#include "load/kernel_loader.hpp"

#include "cache/cache.hpp"
#include "cubin/sidecar.hpp"
#include "damage_support.hpp"
#include "in_place_rewriter.hpp"
#include "resolve/name_resolver.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace kjit_test;
using kjit::Errc;
using kjit::load::KernelHandle;
using kjit::load::KernelLoader;

namespace {

KernelLoader &loader() { return KernelLoader::instance(); }

std::uint64_t loads() { return loader().counters().driver_loads.load(); }
std::uint64_t reads() { return loader().counters().cubin_reads.load(); }

KernelHandle load_ok(const std::string &path, const char *keyword) {
    auto h = loader().load(path, keyword);
    if (!h) {
        ADD_FAILURE() << path << " [" << keyword << "]: " << h.error().message;
        std::abort();
    }
    return std::move(*h);
}

// The handle is what the driver double holds: its CUkernel stands for the handle's name.
void expect_consistent(const KernelHandle &h) {
    const char *driver_name = fake_cuda().kernel_name(h.kernel());
    ASSERT_NE(driver_name, nullptr);
    EXPECT_EQ(h.name(), driver_name);
}

// A sidecar line for the cubin as it is now, naming `name` (a forged or damaged answer).
void forge_sidecar(const std::string &cubin, const std::string &keyword, const std::string &name) {
    struct stat st {};
    ASSERT_EQ(::stat(cubin.c_str(), &st), 0);
    kjit::cubin::sidecar::Line line;
    line.keyword = keyword;
    line.name = name;
    line.cubin_size = static_cast<std::uint64_t>(st.st_size);
    line.mtime_sec = st.st_mtim.tv_sec;
    line.mtime_nsec = static_cast<std::uint32_t>(st.st_mtim.tv_nsec);
    ASSERT_TRUE(kjit::cubin::sidecar::write(kjit::cubin::sidecar::path_for(cubin), {line}).ok());
}

std::string sidecar_name(const std::string &cubin, const std::string &keyword) {
    for (const auto &l : kjit::cubin::sidecar::read(kjit::cubin::sidecar::path_for(cubin)).lines) {
        if (l.keyword == keyword) return l.name;
    }
    return {};
}

}  // namespace

TEST(KernelLoader, CompileThenLoadThenReuseThenRelease) {
    TempDir dir;
    kjit::key::Request r;
    r.cache_dir = dir.file("cache");
    r.arch = "sm_90";
    r.source = sources::kTemplateOne;
    r.keyword = "tmpl";
    kjit::cache::Cache cache;
    auto path = cache.compile(r);
    ASSERT_TRUE(path) << path.error().message;

    const auto loads0 = loads(), reads0 = reads(), unloads0 = loader().counters().library_unloads.load();
    {
        KernelHandle a = load_ok(path->cubin, "tmpl");
        EXPECT_EQ(a.name(), "_Z4tmplILi4EEvPf");
        EXPECT_EQ(a.cubin_path(), path->cubin);
        expect_consistent(a);
        EXPECT_EQ(loads(), loads0 + 1);
        EXPECT_EQ(reads(), reads0 + 1);

        const auto hits0 = loader().counters().load_reuses.load();
        KernelHandle b = load_ok(path->cubin, "tmpl");  // same version: no read, no new library
        EXPECT_EQ(loader().counters().load_reuses.load(), hits0 + 1);
        EXPECT_EQ(reads(), reads0 + 1);
        EXPECT_EQ(loads(), loads0 + 1);
        EXPECT_EQ(b.kernel(), a.kernel());
        EXPECT_EQ(b.library(), a.library());
    }
    EXPECT_EQ(loader().counters().library_unloads.load(), unloads0 + 1);  // with the last handle
    EXPECT_EQ(fake_cuda().counters().bad_handles, 0u);
    KernelHandle again = load_ok(path->cubin, "tmpl");  // unloaded, so read and loaded anew
    EXPECT_EQ(loads(), loads0 + 2);
    EXPECT_EQ(reads(), reads0 + 2);
}

TEST(KernelLoader, MissingGarbageAndStaleSidecarsAreRepaired) {
    Cubin c(sources::kPlain);
    const std::string sidecar = kjit::cubin::sidecar::path_for(c.path);
    for (int variant = 0; variant < 3; ++variant) {
        if (variant == 0) ::unlink(sidecar.c_str());
        if (variant == 1) write_file(sidecar, "\x7f garbage \n\n not a sidecar");
        if (variant == 2) {
            kjit::cubin::sidecar::Line stale{"plain_kernel", 1, 1, 0, std::nullopt, "_Z12plain_kernelPi"};
            ASSERT_TRUE(kjit::cubin::sidecar::write(sidecar, {stale}).ok());
        }
        KernelHandle h = load_ok(c.path, "plain_kernel");
        EXPECT_EQ(h.name(), "_Z12plain_kernelPf") << variant;
        expect_consistent(h);
        EXPECT_EQ(sidecar_name(c.path, "plain_kernel"), "_Z12plain_kernelPf") << variant;
    }
    EXPECT_TRUE(temp_files_in(c.dir.path()).empty());
}

TEST(KernelLoader, SidecarNameAbsentFromTheImageSelfHeals) {
    Cubin c(sources::kPlain);
    // Trusted by every rule the resolver can check (keyword, identity, keyword rule), but wrong.
    forge_sidecar(c.path, "plain_kernel", "_Z12plain_kernelPi");
    const auto heals0 = loader().counters().load_self_heals.load();
    const auto not_found0 = fake_cuda().counters().kernels_not_found;
    KernelHandle h = load_ok(c.path, "plain_kernel");
    EXPECT_EQ(h.name(), "_Z12plain_kernelPf");
    expect_consistent(h);
    EXPECT_EQ(loader().counters().load_self_heals.load(), heals0 + 1);
    EXPECT_EQ(fake_cuda().counters().kernels_not_found, not_found0 + 1);
    EXPECT_EQ(sidecar_name(c.path, "plain_kernel"), "_Z12plain_kernelPf");  // rewritten
}

TEST(KernelLoader, ScannedNameTheDriverLacksIsNotFound) {
    // With -rdc=true a __device__ function keeps its symbol: the keyword rule finds it, but it is
    // not a kernel entry, so the driver has no kernel of that name. No retry: the scan was fresh.
    Cubin c(sources::kDeviceFunction, {"-rdc=true"});
    const auto heals0 = loader().counters().load_self_heals.load();
    auto h = loader().load(c.path, "scale_value");
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error().code, Errc::not_found);
    EXPECT_NE(h.error().message.find("_Z11scale_valuef"), std::string::npos) << h.error().message;
    EXPECT_NE(h.error().message.find(c.path), std::string::npos) << h.error().message;
    EXPECT_EQ(loader().counters().load_self_heals.load(), heals0);
    EXPECT_EQ(loader().live_libraries(), 0u);  // the library loaded for it was released
}

TEST(KernelLoader, ImageForAnotherGpuIsRejectedWithBothArchs) {
    Cubin c(sources::kPlain);
    fake_cuda().set_device_sm(100);
    auto h = loader().load(c.path, "plain_kernel");
    fake_cuda().set_device_sm(90);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error().code, Errc::driver);
    const std::string &m = h.error().message;
    EXPECT_NE(m.find("CUDA_ERROR_NO_BINARY_FOR_GPU"), std::string::npos) << m;
    EXPECT_NE(m.find("targets sm_90, the device is sm_100"), std::string::npos) << m;
    EXPECT_NE(m.find(c.path), std::string::npos) << m;
    EXPECT_EQ(loader().live_libraries(), 0u);
}

TEST(KernelLoader, ImageTheDriverCannotReadIsADriverError) {
    // A cubin whose ELF machine was changed: libkjit's scanner would refuse it, so its sidecar
    // is forged to make the load reach the driver without a scan.
    Cubin c(sources::kPlain);
    std::string bytes = cubin_for(sources::kPlain);
    bytes[18] = 62;  // e_machine = EM_X86_64
    bytes[19] = 0;
    write_file(c.path, bytes);
    forge_sidecar(c.path, "plain_kernel", "_Z12plain_kernelPf");
    auto h = loader().load(c.path, "plain_kernel");
    ASSERT_FALSE(h);
    EXPECT_EQ(h.error().code, Errc::driver);
    EXPECT_NE(h.error().message.find("CUDA_ERROR_INVALID_IMAGE"), std::string::npos) << h.error().message;
}

TEST(KernelLoader, BytesThatAreNoCubinNeverReachTheDriver) {
    Cubin c(sources::kPlain);
    const auto rejected0 = fake_cuda().counters().rejected_images;
    for (const std::string &bytes :
         {std::string("short"), std::string(200, 'x'), cubin_for(sources::kPlain).substr(0, 300)}) {
        write_file(c.path, bytes);
        forge_sidecar(c.path, "plain_kernel", "_Z12plain_kernelPf");  // so nothing scans first
        auto h = loader().load(c.path, "plain_kernel");
        ASSERT_FALSE(h);
        EXPECT_EQ(h.error().code, Errc::bad_cubin) << h.error().message;
        EXPECT_NE(h.error().message.find(c.path), std::string::npos);
    }
    write_file(c.path, "");
    EXPECT_EQ(loader().load(c.path, "plain_kernel").error().code, Errc::bad_cubin);
    EXPECT_EQ(loader().load(c.dir.file("missing.cubin"), "plain_kernel").error().code, Errc::io);
    EXPECT_EQ(loader().load(c.dir.path(), "plain_kernel").error().code, Errc::io);
    EXPECT_EQ(loader().load(c.path, "bad keyword").error().code, Errc::invalid_argument);
    EXPECT_EQ(fake_cuda().counters().rejected_images, rejected0);
}

TEST(KernelLoader, ReplacedCubinIsLoadedAnewAndOldHandlesStayValid) {
    Cubin c(sources::kPlain);
    KernelHandle old_version = load_ok(c.path, "plain_kernel");
    const auto loads0 = loads();
    write_file(c.path, cubin_for("__global__ void plain_kernel(int *p) { p[threadIdx.x] = 7; }"));
    KernelHandle new_version = load_ok(c.path, "plain_kernel");
    EXPECT_EQ(new_version.name(), "_Z12plain_kernelPi");
    EXPECT_EQ(loads(), loads0 + 1);
    EXPECT_NE(new_version.library(), old_version.library());
    EXPECT_EQ(old_version.name(), "_Z12plain_kernelPf");
    expect_consistent(old_version);
    expect_consistent(new_version);
}

TEST(KernelLoader, SeveralKeywordsShareOneLibrary) {
    Cubin c(sources::kPrefixCollision);
    const auto loads0 = loads();
    KernelHandle fp16 = load_ok(c.path, "gemm_fp16");
    KernelHandle gemm = load_ok(c.path, "gemm");  // new keyword: read again, library reused
    EXPECT_EQ(fp16.name(), "_Z9gemm_fp16Pf");
    EXPECT_EQ(gemm.name(), "_Z4gemmPf");
    EXPECT_EQ(loads(), loads0 + 1);
    EXPECT_EQ(gemm.library(), fp16.library());
    const auto hits0 = loader().counters().load_reuses.load();
    KernelHandle gemm2 = load_ok(c.path, "gemm");
    EXPECT_EQ(loader().counters().load_reuses.load(), hits0 + 1);
    EXPECT_EQ(gemm2.kernel(), gemm.kernel());
}

TEST(KernelLoader, FunctionNeedsACurrentContext) {
    Cubin c(sources::kPlain);
    KernelHandle h = load_ok(c.path, "plain_kernel");
    fake_cuda().make_context_current(false);
    auto none = h.function();
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error().code, Errc::driver);
    EXPECT_NE(none.error().message.find("CUDA_ERROR_INVALID_CONTEXT"), std::string::npos) << none.error().message;
    fake_cuda().make_context_current(true);
    auto f = h.function();
    fake_cuda().make_context_current(false);
    ASSERT_TRUE(f) << f.error().message;
    EXPECT_STREQ(fake_cuda().function_name(*f), "_Z12plain_kernelPf");
}

// While one thread replaces the cubin over and over (each version young, so its sidecar lines
// carry content hashes), loaders must always pair a name with the image it came from: the
// driver double finds every name in the bytes it was handed, and no self-heal is ever needed.
TEST(KernelLoader, NameAndImageStayPairedWhileTheCubinIsReplaced) {
    Cubin c(sources::kPlain);
    const std::string versions[2] = {cubin_for(sources::kPlain),
                                     cubin_for("__global__ void plain_kernel(int *p) { p[threadIdx.x] = 7; }")};
    const auto heals0 = loader().counters().load_self_heals.load();
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        for (int i = 0; i < 300; ++i) write_file(c.path, versions[i % 2]);
        stop = true;
    });
    std::vector<std::thread> readers;
    std::atomic<int> loaded{0};
    for (int t = 0; t < 4; ++t) {
        readers.emplace_back([&] {
            while (!stop) {
                auto h = loader().load(c.path, "plain_kernel");
                if (!h) {
                    ADD_FAILURE() << h.error().message;
                    return;
                }
                const char *driver_name = fake_cuda().kernel_name(h->kernel());
                if (!driver_name || h->name() != driver_name ||
                    (h->name() != "_Z12plain_kernelPf" && h->name() != "_Z12plain_kernelPi")) {
                    ADD_FAILURE() << "unpaired: " << h->name();
                }
                ++loaded;
            }
        });
    }
    writer.join();
    for (auto &t : readers) t.join();
    EXPECT_GT(loaded.load(), 0);
    EXPECT_EQ(loader().counters().load_self_heals.load(), heals0);
}

// 8 threads load the same 300 cached kernels at once, each in its own order.
TEST(KernelLoader, EightThreadsLoad300CachedKernels) {
    constexpr int kKernels = 300, kThreads = 8;
    TempDir dir;
    kjit::cache::Cache cache;
    std::vector<std::string> paths(kKernels);
    {
        std::vector<std::thread> compilers;
        for (int t = 0; t < 2; ++t) {
            compilers.emplace_back([&, t] {
                for (int i = t; i < kKernels; i += 2) {
                    kjit::key::Request r;
                    r.cache_dir = dir.file("cache");
                    r.arch = "sm_90";
                    r.source = "template <int N> __global__ void sweep(float *p) { p[threadIdx.x] = N * 0.5f; }\n"
                               "template __global__ void sweep<" +
                               std::to_string(i) + ">(float *);\n";
                    r.keyword = "sweep";
                    auto p = cache.compile(r);
                    ASSERT_TRUE(p) << p.error().message;
                    paths[static_cast<std::size_t>(i)] = p->cubin;
                }
            });
        }
        for (auto &t : compilers) t.join();
    }
    const auto loads0 = loads();
    const auto live0 = fake_cuda().counters().live_libraries;
    std::vector<std::vector<KernelHandle>> held(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            std::vector<int> order(kKernels);
            for (int i = 0; i < kKernels; ++i) order[static_cast<std::size_t>(i)] = i;
            std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(t)));
            for (int i : order) {
                auto h = loader().load(paths[static_cast<std::size_t>(i)], "sweep");
                if (!h) {
                    ADD_FAILURE() << h.error().message;
                    return;
                }
                const std::string expected = "_Z5sweepILi" + std::to_string(i) + "EEvPf";
                const char *driver_name = fake_cuda().kernel_name(h->kernel());
                if (h->name() != expected || !driver_name || expected != driver_name) {
                    ADD_FAILURE() << "kernel " << i << ": " << h->name();
                }
                held[static_cast<std::size_t>(t)].push_back(std::move(*h));
            }
        });
    }
    for (auto &t : threads) t.join();
    EXPECT_EQ(loads(), loads0 + kKernels);  // each cubin loaded once, however many threads
    EXPECT_EQ(fake_cuda().counters().live_libraries, live0 + kKernels);
    held.clear();
    EXPECT_EQ(fake_cuda().counters().live_libraries, live0);
    EXPECT_EQ(fake_cuda().counters().bad_handles, 0u);
}

TEST(KernelLoader, HugeSparseCubinAndFifoAreRefusedWithoutReading) {
    TempDir dir;
    const std::string huge = dir.file("huge.cubin");
    {
        const int fd = ::open(huge.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::ftruncate(fd, off_t{3} << 29), 0);  // 1.5 GiB, sparse: nothing to read
        ::close(fd);
    }
    const auto reads0 = reads();
    auto big = loader().load(huge, "plain_kernel");
    ASSERT_FALSE(big);
    EXPECT_EQ(big.error().code, Errc::bad_cubin);
    EXPECT_NE(big.error().message.find("larger than the 1 GiB"), std::string::npos) << big.error().message;
    EXPECT_EQ(reads(), reads0);

    const std::string fifo = dir.file("fifo.cubin");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    auto f = loader().load(fifo, "plain_kernel");  // must not block waiting for a writer
    ASSERT_FALSE(f);
    EXPECT_EQ(f.error().code, Errc::io);
    EXPECT_NE(f.error().message.find("not a regular file"), std::string::npos) << f.error().message;
}

// ---------------------------------------------------------------------------------------------
// Integrity of cache entries at load time.

namespace {

std::string compile_entry(const std::string &cache_dir, const char *source, const char *keyword,
                          const char *name_expression = nullptr) {
    kjit::key::Request r;
    r.cache_dir = cache_dir;
    r.arch = "sm_90";
    r.source = source;
    r.keyword = keyword;
    if (name_expression) r.name_expression = name_expression;
    kjit::cache::Cache cache;
    auto path = cache.compile(r);
    EXPECT_TRUE(path.ok()) << path.error().message;
    return path.ok() ? path->cubin : std::string();
}

}  // namespace

// Item 5: a cubin flipped in place with its mtime restored (so size, mtime and sidecar all say
// "unchanged") never reaches the driver from a cache entry.
TEST(KernelLoaderIntegrity, DamagedEntryCubinIsBadCubinNamingTheFile) {
    TempDir dir;
    const std::string path = compile_entry(dir.file("cache"), sources::kTemplateOne, "tmpl");
    ASSERT_TRUE(flip_text_byte(path, /*keep_mtime=*/true));
    const auto loads0 = loads();
    auto h = loader().load(path, "tmpl");
    ASSERT_FALSE(h.ok()) << "loaded a damaged cache entry";
    EXPECT_EQ(h.error().code, Errc::bad_cubin);
    EXPECT_NE(h.error().message.find(path), std::string::npos) << h.error().message;
    EXPECT_NE(h.error().message.find("kjit cache verify --fix"), std::string::npos) << h.error().message;
    EXPECT_EQ(loads(), loads0);
}

// Of its kind: without the mtime restored it is refused too; a loose cubin (no recorded hash)
// loads as before, damaged or not.
TEST(KernelLoaderIntegrity, DamageShowsWhateverTheMtimeAndLooseCubinsAreUnchanged) {
    TempDir dir;
    const std::string path = compile_entry(dir.file("cache"), sources::kTemplateOne, "tmpl");
    ASSERT_TRUE(flip_text_byte(path, /*keep_mtime=*/false));
    auto h = loader().load(path, "tmpl");
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.error().code, Errc::bad_cubin);

    Cubin loose(sources::kTemplateOne);
    ASSERT_TRUE(flip_text_byte(loose.path, true));
    KernelHandle k = load_ok(loose.path, "tmpl");
    EXPECT_EQ(k.name(), "_Z4tmplILi4EEvPf");
}

// Item 7 through the loader: after `cp -r`, the copy loads the kernel the name expression chose.
TEST(KernelLoaderIntegrity, NameExpressionEntryLoadsTheRecordedKernelAfterCpR) {
    const char *source = R"(
__global__ void gemm(float *p) { p[threadIdx.x] = 1; }
template <int N> __global__ void gemm_big(float *p) { p[threadIdx.x] = N; }
template __global__ void gemm_big<2>(float *);
)";
    TempDir dir;
    const std::string path = compile_entry(dir.file("cache"), source, "gemm", "gemm_big<2>");
    const std::string script = "cp -r '" + dir.file("cache") + "' '" + dir.file("copy") + "'";
    ASSERT_EQ(std::system(script.c_str()), 0);
    const std::string copied = dir.file("copy") + path.substr(dir.file("cache").size());
    KernelHandle h = load_ok(copied, "gemm");
    EXPECT_EQ(h.name(), "_Z8gemm_bigILi2EEvPf");
    expect_consistent(h);
}

// Of its kind: an entry replaced whole at its path (as a rebuild after an included header
// changed does) while it is loaded and resolved may pair an old cubin with a new manifest. That
// is a race, never reported as a damaged cubin.
TEST(KernelLoaderIntegrity, EntryReplacedWholeWhileReadIsNeverCalledDamaged) {
    TempDir dir;
    // Two complete entries with different cubins for one keyword, their folders swapped in turn:
    // at a's path there is always a whole entry, a's or b's.
    const std::string a = compile_entry(dir.file("a"), sources::numbered_gemm(0).c_str(), "gemm");
    const std::string b = compile_entry(dir.file("b"), sources::numbered_gemm(1).c_str(), "gemm");
    ASSERT_TRUE(read_file(a) != read_file(b));
    const std::string ea = a.substr(0, a.rfind('/')), eb = b.substr(0, b.rfind('/'));
    std::atomic<bool> stop{false};
    std::thread swapper([&] {
        while (!stop.load()) {
            ::renameat2(AT_FDCWD, ea.c_str(), AT_FDCWD, eb.c_str(), RENAME_EXCHANGE);
            std::this_thread::sleep_for(std::chrono::microseconds(500));
        }
    });
    int damaged = 0, ok = 0;
    std::string last_error;
    for (int i = 0; i < 400; ++i) {
        auto h = loader().load(a, "gemm");
        if (h) ++ok;
        if (!h && h.error().code == Errc::bad_cubin) ++damaged, last_error = h.error().message;
        kjit::resolve::NameResolver resolver;
        auto name = resolver.resolve(a, "gemm");
        if (!name && name.error().code == Errc::bad_cubin) ++damaged, last_error = name.error().message;
    }
    stop = true;
    swapper.join();
    EXPECT_EQ(damaged, 0) << last_error;
    EXPECT_GT(ok, 0);
}

// Loads of a cubin that another process rewrites in place (`cp` over it) give a whole
// version's image paired with its kernel, or an error naming the file: never a signal, never
// one version's name on the other's image.
TEST(KernelLoaderRobustness, CubinRewrittenInPlaceWhileLoadedIsNeverASignal) {
    TempDir dir;
    const std::string cubin = dir.file("a.cubin");
    const std::string versions[2] = {cubin_for(sources::numbered_gemm(2)), cubin_for(sources::numbered_gemm(3))};
    write_file(cubin, versions[0]);
    std::atomic<bool> stop{false};
    std::vector<std::thread> readers;
    InPlaceRewriter writer(cubin, {versions[1], versions[0]});
    for (int t = 0; t < 2; ++t) {
        readers.emplace_back([&] {
            while (!stop.load()) {
                auto h = loader().load(cubin, "gemm");
                if (h) {
                    EXPECT_TRUE(h->name() == sources::numbered_gemm_name(2) ||
                                h->name() == sources::numbered_gemm_name(3))
                        << h->name();
                    expect_consistent(*h);
                } else {
                    EXPECT_TRUE(h.error().code == Errc::io || h.error().code == Errc::bad_cubin) << h.error().message;
                    EXPECT_NE(h.error().message.find(cubin), std::string::npos) << h.error().message;
                }
            }
        });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    stop.store(true);
    for (auto &r : readers) r.join();
    writer.stop();
    EXPECT_GT(writer.rewrites(), 10u);
}
