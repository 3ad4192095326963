#include "cubin/name_matcher.hpp"

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>
#include <vector>

using kjit::Errc;
namespace nm = kjit::cubin::name_matcher;

namespace {

std::string pick(std::mt19937 &rng, const std::string &alphabet, std::size_t min_len, std::size_t max_len) {
    std::uniform_int_distribution<std::size_t> len(min_len, max_len), ch(0, alphabet.size() - 1);
    std::string s(len(rng), ' ');
    for (char &c : s) c = alphabet[ch(rng)];
    return s;
}

std::string escape_regex(const std::string &s) {
    std::string out;
    for (char c : s) {
        if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out += '\\';
        out += c;
    }
    return out;
}

}  // namespace

TEST(NameMatcher, KeywordCharacterSet) {
    EXPECT_TRUE(nm::check_keyword("gemm_fp8_kernel").ok());
    EXPECT_TRUE(nm::check_keyword("K2").ok());
    EXPECT_TRUE(nm::check_keyword("ops::norm").ok());
    EXPECT_TRUE(nm::check_keyword("a::b::c").ok());
    for (const char *bad : {"", "gemm.*", "gemm kernel", "gemm-1", "a:b", "::a", "a::", "a:::b", "a::::b",
                            "g\xc3\xa9mm", "gemm\n", "(gemm)"}) {
        const auto st = nm::check_keyword(bad);
        ASSERT_FALSE(st.ok()) << "accepted '" << bad << "'";
        EXPECT_EQ(st.error().code, Errc::invalid_argument);
    }
    EXPECT_NE(nm::check_keyword("gemm.*").error().message.find("[A-Za-z0-9_]"), std::string::npos);
    EXPECT_FALSE(nm::check_keyword(std::string(5000, 'a')).ok());
}

TEST(NameMatcher, PrefixRuleWithAnyLengthDigits) {
    EXPECT_TRUE(nm::matches("_Z15gemm_fp8_kernelILi128ELi256ELi64EEvPfPKfS2_i", "gemm_fp8_kernel"));
    EXPECT_TRUE(nm::matches("_Z15gemm_fp8_kernelILi128ELi256ELi64EEvPfPKfS2_i", "gemm"));  // prefix
    EXPECT_TRUE(nm::matches("_Z4gemmPf", "gemm"));
    EXPECT_FALSE(nm::matches("_Z4gemmPf", "gemm_fp8"));
    EXPECT_FALSE(nm::matches("_ZZ4gemmPf", "gemm"));
    EXPECT_FALSE(nm::matches("_Zgemm", "gemm"));  // digits required
    EXPECT_FALSE(nm::matches("Z4gemm", "gemm"));
    EXPECT_FALSE(nm::matches("x_Z4gemm", "gemm"));  // anchored
    EXPECT_FALSE(nm::matches("$_Z5scalePf$_Z11scale_valuef", "scale"));
    EXPECT_FALSE(nm::matches("_ZN3ops4normEPf", "norm"));  // namespaced needs ns::
}

TEST(NameMatcher, ExternCNameMatchesOnlyExactly) {
    EXPECT_TRUE(nm::matches("c_kernel", "c_kernel"));
    EXPECT_FALSE(nm::matches("c_kernel2", "c_kernel"));
    EXPECT_FALSE(nm::matches("c_kerne", "c_kernel"));
    EXPECT_TRUE(nm::is_exact_identifier("c_kernel", "c_kernel"));
}

TEST(NameMatcher, KeywordIsLiteralTextNeverARegex) {
    // Keyword characters are restricted, but digits inside the keyword are literal too.
    EXPECT_TRUE(nm::matches("_Z5k2fooPf", "k2foo"));
    EXPECT_FALSE(nm::matches("_Z5kXfooPf", "k2foo"));
    // A keyword starting with a digit: the regex's \d+ may give digits back.
    EXPECT_TRUE(nm::matches("_Z152gemm", "52gemm"));
    EXPECT_TRUE(nm::matches("_Z152gemm", "2gemm"));
    EXPECT_FALSE(nm::matches("_Z152gemm", "152gemm"));
}

TEST(NameMatcher, ExactIdentifierComparesLengthDigits) {
    EXPECT_TRUE(nm::is_exact_identifier("_Z4gemmPf", "gemm"));
    EXPECT_FALSE(nm::is_exact_identifier("_Z9gemm_fp16Pf", "gemm"));
    EXPECT_TRUE(nm::is_exact_identifier("_Z9gemm_fp16Pf", "gemm_fp16"));
    EXPECT_FALSE(nm::is_exact_identifier("_Z40gemmPf", "gemm"));
    EXPECT_TRUE(nm::is_exact_identifier("_ZN3ops4normEPf", "ops::norm"));
    EXPECT_FALSE(nm::is_exact_identifier("_ZN3ops9normalizeEPf", "ops::norm"));
}

// The Itanium ABI's <source-name> is a length number, then the identifier. The GNU demangler
// reads the number as a number (c++filt turns _Z04gemmPf into gemm(float*)), so leading zeros
// do not change which identifier a name holds.
TEST(NameMatcher, LengthDigitsAreReadAsANumber) {
    EXPECT_TRUE(nm::is_exact_identifier("_Z04gemmPf", "gemm"));
    EXPECT_TRUE(nm::is_exact_identifier("_Z0000000000000000000000004gemmPf", "gemm"));
    EXPECT_TRUE(nm::is_exact_identifier("_ZN3ops04normEPf", "ops::norm"));
    EXPECT_FALSE(nm::is_exact_identifier("_Z009gemm_fp16Pf", "gemm"));
    EXPECT_FALSE(nm::is_exact_identifier("_Z18446744073709551620gemmPf", "gemm"));  // 2^64 + 4
    auto r = nm::select({{"_Z04gemmPf", true}, {"_Z9gemm_fp16Pf", true}}, "gemm");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(*r, "_Z04gemmPf");
}

// A sidecar line is space-separated text ending in a newline: a name holding a space or a
// control byte could not be read back, and one holding a newline could forge a line for another
// keyword. Such names are never candidates (no compiler makes them; a crafted cubin can).
TEST(NameMatcher, NamesWithSpaceOrControlBytesNeverMatch) {
    EXPECT_FALSE(nm::matches("_Z4gemmPf x", "gemm"));
    EXPECT_FALSE(nm::matches("_Z4gemmPf\nvictim 1 2.000000000 - _Z6victimPf 0", "gemm"));
    EXPECT_FALSE(nm::matches("_Z4gemm\tPf", "gemm"));
    EXPECT_FALSE(nm::matches("_Z4gemm\x7fPf", "gemm"));
    EXPECT_FALSE(nm::matches(std::string_view("_Z4gemm\0Pf", 10), "gemm"));
    EXPECT_TRUE(nm::matches("_Z4gemmPf\xc3\xa9", "gemm"));  // bytes >= 0x80: UTF-8 identifiers are fine
    auto only = nm::select({{"_Z4gemmPf \n", true}}, "gemm");
    ASSERT_FALSE(only.ok());
    EXPECT_EQ(only.error().code, Errc::not_found);
    EXPECT_NE(only.error().message.find("space or control"), std::string::npos) << only.error().message;
    auto r = nm::select({{"_Z4gemmPf\nx", true}, {"_Z4gemmPi", true}}, "gemm");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(*r, "_Z4gemmPi");
}

TEST(NameMatcher, NamespacedKeywords) {
    EXPECT_TRUE(nm::matches("_ZN3ops4normEPf", "ops::norm"));
    EXPECT_TRUE(nm::matches("_ZN3ops9normalizeEPf", "ops::norm"));
    EXPECT_FALSE(nm::matches("_ZN4ops24normEPf", "ops::norm"));
    EXPECT_TRUE(nm::matches("_ZN4ops24normEPf", "ops2::norm"));
    EXPECT_TRUE(nm::matches("_ZN1a1b6kernelEv", "a::b::kernel"));
    EXPECT_FALSE(nm::matches("_ZN1a6kernelEv", "a::b::kernel"));
    EXPECT_FALSE(nm::matches("_Z4normPf", "ops::norm"));
}

TEST(NameMatcher, SelectOneMatchWins) {
    // A single match wins even when it is not a kernel entry.
    auto r = nm::select({{"_Z5otherPf", true}, {"_Z11scale_valuef", false}}, "scale_value");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, "_Z11scale_valuef");
}

TEST(NameMatcher, SelectKeepsKernelEntries) {
    auto r = nm::select({{"_Z11scale_valuef", false}, {"_Z5scalePf", true}}, "scale");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, "_Z5scalePf");
}

TEST(NameMatcher, SelectThenExactIdentifier) {
    auto r = nm::select({{"_Z9gemm_fp16Pf", true}, {"_Z4gemmPf", true}}, "gemm");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, "_Z4gemmPf");
}

TEST(NameMatcher, SelectAmbiguousListsCandidates) {
    auto r = nm::select({{"_Z4tmplILi1EEvPf", true}, {"_Z4tmplILi2EEvPf", true}, {"_Z4tmplILi3EEvPf", true}}, "tmpl");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::ambiguous);
    for (const char *n : {"_Z4tmplILi1EEvPf", "_Z4tmplILi2EEvPf", "_Z4tmplILi3EEvPf"}) {
        EXPECT_NE(r.error().message.find(n), std::string::npos) << r.error().message;
    }
    // Several matches, none an entry: ambiguous too.
    auto none = nm::select({{"_Z4gemmf", false}, {"_Z9gemm_fp16f", false}}, "gemm");
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.error().code, Errc::ambiguous);
    // Several entries, none with the exact identifier: ambiguous.
    auto inexact = nm::select({{"_Z9gemm_fp16Pf", true}, {"_Z9gemm_bf16Pf", true}}, "gemm");
    ASSERT_FALSE(inexact.ok());
    EXPECT_EQ(inexact.error().code, Errc::ambiguous);
}

TEST(NameMatcher, SelectCapsAHugeCandidateList) {
    std::vector<std::string> names;
    for (int i = 0; i < 1000; ++i) names.push_back("_Z4tmplILi" + std::to_string(i) + "EEvPf");
    std::vector<nm::Candidate> cands;
    for (const auto &n : names) cands.push_back({n, true});
    auto r = nm::select(cands, "tmpl");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("and 936 more"), std::string::npos);
    EXPECT_LT(r.error().message.size(), 4096u);
}

TEST(NameMatcher, SelectMergesDuplicateNames) {
    auto r = nm::select({{"_Z4gemmPf", false}, {"_Z4gemmPf", true}}, "gemm");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, "_Z4gemmPf");
}

TEST(NameMatcher, SelectNotFound) {
    auto r = nm::select({{"_Z4gemmPf", true}}, "attention");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, Errc::not_found);
    EXPECT_NE(r.error().message.find("attention"), std::string::npos);
    EXPECT_EQ(nm::select({}, "gemm").error().code, Errc::not_found);
}

// No match: the message lists the kernel entries the cubin does hold (device functions and
// unusable names left out, each once, at most eight), and says that an uninstantiated template
// leaves no symbol.
TEST(NameMatcher, NotFoundListsTheKernelsItHolds) {
    std::vector<nm::Candidate> held = {{"_Z4gemmILi2EEvPf", true},
                                       {"_Z4gemmILi1EEvPf", true},
                                       {"_Z4gemmILi1EEvPf", true},
                                       {"_Z6helperf", false},
                                       {"_Z4gemm Pf", true}};
    auto r = nm::select(held, "gemn");
    ASSERT_FALSE(r.ok());
    const std::string &m = r.error().message;
    EXPECT_NE(m.find("the kernels it holds: _Z4gemmILi1EEvPf, _Z4gemmILi2EEvPf."), std::string::npos) << m;
    EXPECT_EQ(m.find("_Z6helperf"), std::string::npos) << m;
    EXPECT_EQ(m.find("_Z4gemm Pf"), std::string::npos) << m;
    EXPECT_NE(m.find("never instantiated"), std::string::npos) << m;
    static const std::vector<std::string> more = {"_Z2kav", "_Z2kbv", "_Z2kcv", "_Z2kdv", "_Z2kev",
                                                  "_Z2kfv", "_Z2kgv", "_Z2khv", "_Z2kiv", "_Z2kjv"};
    for (const std::string &name : more) held.push_back({name, true});  // Candidate holds a view
    const std::string many = nm::select(held, "gemn").error().message;
    EXPECT_NE(many.find("and 4 more"), std::string::npos) << many;
    EXPECT_NE(nm::select({{"_Z6helperf", false}}, "gemn").error().message.find("it holds no kernel entry"),
              std::string::npos);
}

// Property test: matches() agrees with std::regex("^_Z\d+" + escaped keyword) or equality, on
// generated names and keywords built to collide often (shared prefixes, digit runs).
TEST(NameMatcher, AgreesWithStdRegexOnGeneratedNames) {
    std::mt19937 rng(20261202);
    const std::string ident = "ab_1239";
    const std::string noise = "ab_1239ZEPfiv$";
    int agreed_true = 0;
    for (int round = 0; round < 400; ++round) {
        const bool namespaced = round % 4 == 3;
        std::string scope = namespaced ? pick(rng, ident, 1, 3) : "";
        std::string keyword = pick(rng, ident, 1, 4);
        const std::string full_keyword = namespaced ? scope + "::" + keyword : keyword;
        ASSERT_TRUE(nm::check_keyword(full_keyword).ok()) << full_keyword;
        const std::regex re(namespaced ? "^_ZN" + std::to_string(scope.size()) + escape_regex(scope) + "\\d+" +
                                             escape_regex(keyword)
                                       : "^_Z\\d+" + escape_regex(keyword));
        for (int i = 0; i < 150; ++i) {
            std::string name;
            switch (i % 5) {
                case 0: name = pick(rng, noise, 0, 12); break;
                case 1: name = "_Z" + pick(rng, "0123456789", 0, 3) + pick(rng, ident, 0, 6); break;
                case 2:
                    name = "_Z" + std::to_string(keyword.size()) + keyword.substr(0, rng() % (keyword.size() + 1)) +
                           pick(rng, noise, 0, 4);
                    break;
                case 3:
                    name = "_ZN" + std::to_string(scope.size()) + scope + pick(rng, "0123456789", 0, 2) +
                           pick(rng, ident, 0, 6);
                    break;
                default:
                    name = full_keyword.substr(0, rng() % (full_keyword.size() + 1)) + pick(rng, ident, 0, 1);
                    break;
            }
            const bool expected = name == full_keyword || std::regex_search(name, re);
            ASSERT_EQ(nm::matches(name, full_keyword), expected)
                << "name '" << name << "' keyword '" << full_keyword << "'";
            agreed_true += expected;
        }
    }
    EXPECT_GT(agreed_true, 1000);  // the generator does produce plenty of matches
}
