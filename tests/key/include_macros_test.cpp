// Macro expansion for computed includes (src/key/include_macros.hpp): the header names an
// `#include MACRO` operand may give, and giving up (the scanner then records everything) past a
// budget of steps, memory and time.
#include "key/include_macros.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstddef>
#include <string>
#include <vector>

// The expansion itself, on the shapes that must terminate or give up: self- and mutually
// recursive macros end (hide sets), variadic macros and stringized blanks, a hide set lifted
// for a closing parenthesis from outside the expansion, and too many combinations of
// definitions (past the budget: not followed, so the scanner records everything).
TEST(IncludeMacros, ExpansionsTerminateAndGiveUpPastTheirBudget) {
    namespace im = kjit::key::include_macros;
    auto names = [](const std::string &defines, const std::string &operand) {
        im::Table t;
        std::size_t pos = 0;
        while (pos < defines.size()) {
            const std::size_t end = defines.find('\n', pos);
            t.add_directive(defines.substr(pos, end - pos));
            pos = end == std::string::npos ? defines.size() : end + 1;
        }
        const im::Expansion e = im::header_names(operand, t);
        std::vector<std::string> out;
        if (!e.followed) out.push_back("(not followed)");
        for (const auto &h : e.names) out.push_back(h.quoted ? '"' + h.name + '"' : '<' + h.name + '>');
        return out;
    };
    using V = std::vector<std::string>;
    EXPECT_EQ(names(" A A", "A"), V{});
    EXPECT_EQ(names(" A B\n B A", "A"), V{});
    EXPECT_EQ(names(" A(x) A(x)", "A(<a.h>)"), V{});
    EXPECT_EQ(names(" V(...) <__VA_ARGS__>", "V(a.h)"), V{"<a.h>"});
    EXPECT_EQ(names(" V(x, ...) <x/__VA_ARGS__>", "V(dir, a.h)"), V{"<dir/a.h>"});
    EXPECT_EQ(names(" S(x) #x", "S(  a  b.h )"), V{"\"a b.h\""});
    EXPECT_EQ(names(" H(x) <x>", "H(a b.h)"), (V{"<a b.h>", "<ab.h>"}));
    // f(2)(9) as in the standard's example: g's ')' comes from outside f's expansion.
    EXPECT_EQ(names(" f(a) a*g\n g(a) f(a)\n N(x) S(x)\n S(x) #x", "N(f(2)(9))"),
              (V{"\"2*9*g\"", "\"2*f(9)\"", "\"2*g(9)\"", "\"f(2)(9)\""}));  // the first: the standard's answer
    EXPECT_EQ(names(" P(a, b) a ## b\n ab \"pasted.h\"", "P(a, b)"), (V{"\"pasted.h\""}));
    EXPECT_EQ(names("", "__FILE__"), V{"(not followed)"});
    EXPECT_EQ(names(" O(x) __VA_OPT__(x)", "O(a)"), V{"(not followed)"});
    std::string many, operand = "<";
    for (int i = 0; i < 12; ++i) {
        many += " M" + std::to_string(i) + " a\n M" + std::to_string(i) + " b\n";
        operand += "M" + std::to_string(i) + "/";
    }
    EXPECT_EQ(names(many, operand + "x.h>"), V{"(not followed)"});
    std::string nested = "I(";
    for (int i = 0; i < 5000; ++i) nested += "I(";
    nested += "a.h" + std::string(5001, ')') + ")";
    EXPECT_EQ(names(" I(x) x", nested), V{"(not followed)"});  // not a stack overflow
}

// Combinations of two arguments' alternatives are bounded while they are made, not after: 256
// alternatives of each (8 macros that may or may not be defined) made 65536 copies of a long
// replacement list (over 500 MB) before the budget said no.
TEST(IncludeMacros, ArgumentCombinationsStayWithinTheBudgetInMemory) {
    namespace im = kjit::key::include_macros;
    auto table = [](int macros, int filler) {
        im::Table t;
        for (int i = 0; i < macros; ++i) t.add_directive(" M" + std::to_string(i) + " a");
        std::string body = " F(x, y) <x";
        for (int i = 0; i < filler; ++i) body += " t";
        t.add_directive(body + " y>");
        return t;
    };
    auto operand = [](int macros) {
        std::string arg;
        for (int i = 0; i < macros; ++i) arg += " M" + std::to_string(i);
        return "F(" + arg + "," + arg + ")";
    };
    // 8 x 8 alternatives (and as many with F left undefined): within the budget.
    const im::Expansion within = im::header_names(operand(3), table(3, 2));
    EXPECT_TRUE(within.followed);
    EXPECT_EQ(within.names.size(), 2u * 64u);  // each with and without blanks
    struct rusage before {};
    ASSERT_EQ(::getrusage(RUSAGE_SELF, &before), 0);
    const im::Expansion past = im::header_names(operand(8), table(8, 120));
    struct rusage after {};
    ASSERT_EQ(::getrusage(RUSAGE_SELF, &after), 0);
    EXPECT_FALSE(past.followed);
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "peak resident set grew by KiB";
}

// The budget counts the tokens each step copies, not only the steps: a 3.6 KB operand whose
// 800 macros each expand to 1000 names of a function-like macro (never followed by '(') made
// every one of its 100000 steps copy a state of about 1800 tokens (6.6 s at -O2); now it gives
// up within a small part of that.
TEST(IncludeMacros, ExpansionsStayWithinTheBudgetInTime) {
    namespace im = kjit::key::include_macros;
    im::Table t;
    std::string c = " C", a = " A";
    for (int i = 0; i < 1000; ++i) c += " B";
    for (int i = 0; i < 800; ++i) a += " C";
    ASSERT_TRUE(t.add_directive(" B(x) x") && t.add_directive(c) && t.add_directive(a));
    struct rusage before {};
    ASSERT_EQ(::getrusage(RUSAGE_THREAD, &before), 0);
    const im::Expansion e = im::header_names("A", t);
    struct rusage after {};
    ASSERT_EQ(::getrusage(RUSAGE_THREAD, &after), 0);
    EXPECT_FALSE(e.followed);
    auto seconds = [](const struct rusage &r) {
        return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
               static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
    };
    EXPECT_LT(seconds(after) - seconds(before), 2.0) << "CPU seconds";
}
