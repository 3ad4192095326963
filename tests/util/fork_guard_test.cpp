// The list of process-wide state (src/util/fork_guard.hpp): every piece is listed once, in
// order, saying what it holds and what a forked child does with it; every piece that must be
// renewed in a child has exactly one handler, registered under its name while libkjit loads;
// the pieces kept as they are have none. This binary links every part's objects (not the
// archive), so every module's initializers run as they do in libkjit.so.
#include "util/fork_guard.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace fork_guard = kjit::fork_guard;

namespace {

std::string describe(const fork_guard::Piece &piece) {
    return std::string(piece.owner ? piece.owner : "?") + ": " + (piece.holds ? piece.holds : "?");
}

}  // namespace

TEST(ForkGuard, EveryPieceIsListedOnceInOrderWithItsOwnerAndWhatAChildDoes) {
    const auto &pieces = fork_guard::pieces();
    const unsigned count = static_cast<unsigned>(fork_guard::State::count);
    ASSERT_EQ(sizeof(pieces) / sizeof(pieces[0]), count);
    for (unsigned i = 0; i < count; ++i) {
        const fork_guard::Piece &piece = pieces[i];
        EXPECT_EQ(static_cast<unsigned>(piece.state), i);
        ASSERT_NE(piece.owner, nullptr);
        ASSERT_NE(piece.holds, nullptr);
        ASSERT_NE(piece.in_child, nullptr);
        EXPECT_GT(std::strlen(piece.owner), 0u) << i;
        EXPECT_GT(std::strlen(piece.holds), 0u) << i;
        EXPECT_GT(std::strlen(piece.in_child), 0u) << i;
    }
}

TEST(ForkGuard, EachPieceRenewedInAChildHasExactlyOneHandlerAndEachKeptPieceNone) {
    for (const fork_guard::Piece &piece : fork_guard::pieces()) {
        EXPECT_EQ(fork_guard::handlers_registered(piece.state), piece.has_handler ? 1u : 0u)
            << describe(piece)
            << (piece.has_handler ? " must register one fork handler under its name"
                                  : " is listed as kept in a child, yet has a handler");
    }
}
