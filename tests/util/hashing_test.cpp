// Content hashes of files: what the cache checks young headers and young cubins with.
#include "util/hashing.hpp"

#include "in_place_rewriter.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

using kjit::Errc;
using namespace kjit_test;

TEST(Hashing, FileHashIsTheHashOfItsBytes) {
    TempDir dir;
    const std::string path = dir.file("h.cuh");
    const std::string text(100'000, 'x');
    write_file(path, text);
    kjit::FileIdentity identity;
    auto h = kjit::hash_file64(path, &identity);
    ASSERT_TRUE(h.ok()) << h.error().message;
    EXPECT_EQ(*h, kjit::hash64(text));
    EXPECT_EQ(identity.size, text.size());
    write_file(path, "");
    auto empty = kjit::hash_file64(path, nullptr);
    ASSERT_TRUE(empty.ok()) << empty.error().message;
    EXPECT_EQ(*empty, kjit::hash64({}));
}

// hash64 of two pieces is hash64 of the two joined (origin() hashes a list without copying it;
// origin.txt files on disk hold values made by the joined form).
TEST(Hashing, TwoPiecesHashAsTheirJoin) {
    const std::string big(100000, 'x');
    for (const auto &[a, b] : std::vector<std::pair<std::string, std::string>>{
             {"", ""}, {"a", ""}, {"", "b"}, {"0 12 /opt/include\n", big}, {big, "tail"}}) {
        EXPECT_EQ(kjit::hash64(a, b), kjit::hash64(a + b)) << a.size() << "+" << b.size();
    }
}

TEST(Hashing, MissingFileAndFolderAreIoErrorsNamingThePath) {
    TempDir dir;
    for (const std::string &path : {dir.file("absent.cuh"), dir.path()}) {
        auto h = kjit::hash_file64(path, nullptr);
        ASSERT_FALSE(h.ok());
        EXPECT_EQ(h.error().code, Errc::io);
        EXPECT_NE(h.error().message.find(path), std::string::npos) << h.error().message;
    }
}

// An editor or `cp` rewriting a header in place while a compile hit hashes it: 0.3.0 mapped
// the file and died of SIGBUS. Every hash is of what the file held at one moment, or an error
// naming the file.
TEST(HashingRobustness, FileRewrittenInPlaceWhileHashedIsNeverASignal) {
    TempDir dir;
    const std::string path = dir.file("h.cuh");
    const std::string versions[2] = {std::string(200'000, 'a'), std::string(50'000, 'b')};
    write_file(path, versions[0]);
    std::atomic<bool> stop{false};
    std::atomic<int> whole{0};
    std::thread reader([&] {
        while (!stop.load()) {
            kjit::FileIdentity identity;
            auto h = kjit::hash_file64(path, &identity);
            if (h) {
                // The writer truncates, then writes from the start: what a reader can see at one
                // moment is a prefix of one version, of the size it reports.
                const auto n = static_cast<std::size_t>(identity.size);
                EXPECT_TRUE(*h == kjit::hash64(std::string_view(versions[0]).substr(0, n)) ||
                            *h == kjit::hash64(std::string_view(versions[1]).substr(0, n)))
                    << "a hash of a mix of versions, size " << identity.size;
                whole.fetch_add(1);
            } else {
                EXPECT_EQ(h.error().code, Errc::io) << h.error().message;
                EXPECT_NE(h.error().message.find(path), std::string::npos) << h.error().message;
            }
        }
    });
    InPlaceRewriter writer(path, {versions[1], versions[0]});
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    stop.store(true);
    reader.join();
    writer.stop();
    EXPECT_GT(writer.rewrites(), 10u);
}
