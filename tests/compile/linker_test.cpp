// The linker's reading of link inputs (compile/linker.hpp, read_input): a library this process
// read is not read again while it is the very file that was read and was not young then; any
// change (rewritten, replaced by another file, young) is read again.
#include "compile/linker.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

using kjit::compile::linker::inputs_read;
using kjit::compile::linker::read_input;
using namespace kjit_test;

namespace {

std::string library(int constant) {
    return device_code_for("extern \"C\" __device__ int lib_value(int i) { return i * " + std::to_string(constant) +
                               "; }\n",
                           "sm_90", DeviceCode::ltoir);
}

// read_input of `path`, which must succeed; its content hash.
std::string hash_of(const std::string &path) {
    auto in = read_input(path);
    EXPECT_TRUE(in.ok()) << in.error().message;
    return in ? in->content_hash : std::string();
}

}  // namespace

TEST(Linker, AnInputReadOnceIsNotReadAgainUntilItChanges) {
    TempDir dir;
    const std::string kept = dir.file("kept.ltoir"), edited = dir.file("edited.ltoir"),
                      replaced = dir.file("replaced.ltoir");
    for (const std::string &path : {kept, edited, replaced}) write_file(path, library(3));
    // Past the window in which a write could keep a file's size and times (kRacyWindowNs).
    std::this_thread::sleep_for(std::chrono::milliseconds(kjit::kRacyWindowNs / 1'000'000 + 200));

    const auto reads = inputs_read();
    const std::string hash = hash_of(kept);
    for (int i = 0; i < 100; ++i) {
        auto again = read_input(kept);
        ASSERT_TRUE(again.ok()) << again.error().message;
        EXPECT_EQ(again->content_hash, hash);
        EXPECT_TRUE(*again->bytes == read_file(kept)) << "the bytes differ from the file's";
    }
    EXPECT_EQ(inputs_read(), reads + 1) << "a file that did not change was read again";

    // Rewritten in place with other content: read again, and again while young.
    EXPECT_EQ(hash_of(edited), hash);
    write_file(edited, library(4));
    const auto before_edit = inputs_read();
    const std::string new_hash = hash_of(edited);
    EXPECT_NE(new_hash, hash);
    EXPECT_EQ(hash_of(edited), new_hash);
    EXPECT_EQ(inputs_read(), before_edit + 2) << "a young file was answered from memory";

    // Replaced by another file of the same content (another inode): read again.
    EXPECT_EQ(hash_of(replaced), hash);
    write_file(replaced + ".new", library(3));
    ASSERT_EQ(::rename((replaced + ".new").c_str(), replaced.c_str()), 0);
    const auto before_replace = inputs_read();
    EXPECT_EQ(hash_of(replaced), hash);
    EXPECT_EQ(inputs_read(), before_replace + 1);

    // Gone: the error names it, whatever was read before.
    ASSERT_EQ(::unlink(kept.c_str()), 0);
    auto gone = read_input(kept);
    ASSERT_FALSE(gone.ok());
    EXPECT_NE(gone.error().message.find("cannot open link input '" + kept + "'"), std::string::npos)
        << gone.error().message;
}
