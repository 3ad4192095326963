#include "key/include_macros.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace kjit::key::include_macros {

namespace {

// Bounds on one operand's expansion: past them it is "not followed" (the scanner's fallback).
// A step may copy its whole state (each alternative, and the macro left as written), so the
// tokens copied are counted too.
constexpr std::size_t kMaxSteps = 100000;
constexpr std::size_t kMaxCopied = 100000;
constexpr std::size_t kMaxAlternatives = 256;
constexpr int kMaxDepth = 64;  // arguments expanded within arguments (the stack stays small)

enum class Kind { identifier, number, string, punct, placemarker };

struct Token {
    Kind kind = Kind::punct;
    std::string text;
    bool space = false;              // whitespace before it
    bool paste = false;              // a ## operator of a replacement list
    std::vector<std::string> hide;   // macros it may not expand (the standard's hide set)
};
using Tokens = std::vector<Token>;

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(unsigned char c) {
    return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
bool is_ident_char(unsigned char c) { return is_ident_start(c) || is_digit(c); }
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

// Preprocessing tokens of one logical line; comments are whitespace.
Tokens tokenize(std::string_view s) {
    Tokens out;
    bool space = false;
    std::size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (is_blank(static_cast<char>(c))) {
            space = true;
            ++i;
            continue;
        }
        if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') break;
        if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
            const std::size_t end = s.find("*/", i + 2);
            i = end == std::string_view::npos ? s.size() : end + 2;
            space = true;
            continue;
        }
        Token t;
        t.space = space;
        space = false;
        const std::size_t start = i;
        if (is_ident_start(c)) {
            while (i < s.size() && is_ident_char(static_cast<unsigned char>(s[i]))) ++i;
            t.kind = Kind::identifier;
        } else if (is_digit(c) || (c == '.' && i + 1 < s.size() && is_digit(static_cast<unsigned char>(s[i + 1])))) {
            ++i;
            while (i < s.size()) {
                const unsigned char d = static_cast<unsigned char>(s[i]);
                if ((d == '+' || d == '-') && ((s[i - 1] | 0x20) == 'e' || (s[i - 1] | 0x20) == 'p')) {
                    ++i;
                } else if (is_ident_char(d) || d == '.' || d == '\'') {
                    ++i;
                } else {
                    break;
                }
            }
            t.kind = Kind::number;
        } else if (c == '"' || c == '\'') {
            ++i;
            while (i < s.size() && static_cast<unsigned char>(s[i]) != c) i += s[i] == '\\' ? 2u : 1u;
            i = std::min(i + 1, s.size());
            t.kind = Kind::string;
        } else if (c == '#' && i + 1 < s.size() && s[i + 1] == '#') {
            i += 2;
        } else {
            ++i;
        }
        t.text.assign(s.substr(start, i - start));
        out.push_back(std::move(t));
    }
    return out;
}

bool is_punct(const Token &t, std::string_view p) { return t.kind == Kind::punct && t.text == p; }

bool hidden(const Token &t, const std::string &name) {
    return std::find(t.hide.begin(), t.hide.end(), name) != t.hide.end();
}

void add_hide(Token &t, const std::vector<std::string> &names) {
    for (const std::string &n : names) {
        if (!hidden(t, n)) t.hide.push_back(n);
    }
}

// A name the implementation may predefine (reserved: "__x" or "_X").
bool reserved(const std::string &name) {
    return name.size() >= 2 && name[0] == '_' && (name[1] == '_' || (name[1] >= 'A' && name[1] <= 'Z'));
}

// The # operator: the argument's spelling as a string literal.
Token stringize(const Tokens &arg, bool space) {
    Token t;
    t.kind = Kind::string;
    t.space = space;
    t.text = "\"";
    for (std::size_t i = 0; i < arg.size(); ++i) {
        if (arg[i].kind == Kind::placemarker) continue;
        if (i > 0 && arg[i].space) t.text += ' ';
        if (arg[i].kind == Kind::string) {
            for (char ch : arg[i].text) {
                if (ch == '"' || ch == '\\') t.text += '\\';
                t.text += ch;
            }
        } else {
            t.text += arg[i].text;
        }
    }
    t.text += '"';
    return t;
}

// The ## operator on two tokens: their spellings joined, read again as tokens.
Tokens glue(const Token &a, const Token &b) {
    if (a.kind == Kind::placemarker) return {b};
    if (b.kind == Kind::placemarker) return {a};
    Tokens joined = tokenize(a.text + b.text);
    if (joined.empty()) {
        Token p;
        p.kind = Kind::placemarker;
        return {p};
    }
    joined.front().space = a.space;
    for (Token &t : joined) t.hide = a.hide;
    return joined;
}

class Expander {
public:
    explicit Expander(const Table &table) : table_(table) {}

    bool failed() const { return failed_; }

    // Every full expansion of `input`: each macro replaced by each of its definitions in turn,
    // or left as written.
    std::vector<Tokens> expand(Tokens input) {
        struct State {
            Tokens out;
            Tokens rest;
            std::size_t pos = 0;
        };
        std::vector<State> pending;
        pending.push_back(State{{}, std::move(input), 0});
        std::vector<Tokens> results;
        while (!pending.empty() && !failed_) {
            State s = std::move(pending.back());
            pending.pop_back();
            bool replaced = false;
            while (s.pos < s.rest.size() && !failed_) {
                if (++steps_ > kMaxSteps) {
                    failed_ = true;
                    break;
                }
                const Token &t = s.rest[s.pos];
                const std::vector<Definition> *defs =
                    t.kind == Kind::identifier && !hidden(t, t.text) ? table_.find(t.text) : nullptr;
                if (!defs) {
                    s.out.push_back(s.rest[s.pos++]);
                    continue;
                }
                // The state copied for the name left as written, and searched for each
                // definition's arguments (each alternative's copy is counted below).
                copied_ += (defs->size() + 1) * (s.out.size() + s.rest.size());
                if (copied_ > kMaxCopied) {
                    failed_ = true;
                    break;
                }
                // Left undefined here (#undef, or defined under another #if): the name stays,
                // never expanded again.
                State as_written = s;
                as_written.rest[as_written.pos].hide.push_back(t.text);
                for (const Definition &d : *defs) {
                    // The hide set: the name's own, and for an invocation only the names that
                    // also hide its closing parenthesis (which may come from outside the
                    // expansion that produced the name).
                    std::vector<std::string> hs = t.hide;
                    std::size_t after = s.pos + 1;
                    std::vector<Tokens> args;
                    if (d.function_like) {
                        auto parsed = arguments(s.rest, after);
                        if (!parsed || !fit_arity(d, *parsed)) continue;  // NVRTC fails on it there
                        args = std::move(*parsed);
                        const Token &close = s.rest[after - 1];
                        hs.erase(std::remove_if(hs.begin(), hs.end(), [&](const std::string &n) { return !hidden(close, n); }),
                                 hs.end());
                    }
                    hs.push_back(t.text);
                    for (Tokens &r : substitute(d, args, hs, t.space)) {
                        copied_ += r.size() + s.out.size() + s.rest.size() - after;
                        r.insert(r.end(), s.rest.begin() + static_cast<std::ptrdiff_t>(after), s.rest.end());
                        pending.push_back(State{s.out, std::move(r), 0});
                    }
                    if (pending.size() > kMaxAlternatives * 4) failed_ = true;
                }
                pending.push_back(std::move(as_written));
                replaced = true;
                break;
            }
            if (!replaced && !failed_) {
                results.push_back(std::move(s.out));
                if (results.size() > kMaxAlternatives) failed_ = true;
            }
        }
        if (failed_) return {};
        return results;
    }

private:
    // The arguments of a function-like macro invocation whose name ends before `at`; `at` then
    // points past the closing parenthesis. Nothing when no '(' follows or it is not closed.
    static std::optional<std::vector<Tokens>> arguments(const Tokens &ts, std::size_t &at) {
        if (at >= ts.size() || !is_punct(ts[at], "(")) return std::nullopt;
        std::vector<Tokens> args(1);
        int depth = 0;
        for (std::size_t i = at + 1; i < ts.size(); ++i) {
            const Token &t = ts[i];
            if (is_punct(t, "(")) ++depth;
            if (is_punct(t, ")")) {
                if (depth == 0) {
                    at = i + 1;
                    return args;
                }
                --depth;
            }
            if (depth == 0 && is_punct(t, ",")) {
                args.emplace_back();
                continue;
            }
            args.back().push_back(t);
        }
        return std::nullopt;
    }

    // Matches `args` to `d`'s parameters (the variadic one takes the rest, commas included).
    static bool fit_arity(const Definition &d, std::vector<Tokens> &args) {
        const std::size_t n = d.params.size();
        if (!d.variadic) return args.size() == n || (n == 0 && args.size() == 1 && args[0].empty());
        if (args.size() + 1 == n) {
            args.emplace_back();
            return true;
        }
        if (args.size() < n) return false;
        while (args.size() > n) {
            Tokens last = std::move(args.back());
            args.pop_back();
            Token comma;
            comma.text = ",";
            args.back().push_back(comma);
            args.back().insert(args.back().end(), last.begin(), last.end());
        }
        return true;
    }

    // d's replacement list with `args` substituted (# and ## applied), each alternative of the
    // fully expanded arguments taken in turn, every token given the hide set `hs`.
    std::vector<Tokens> substitute(const Definition &d, const std::vector<Tokens> &args,
                                   const std::vector<std::string> &hs, bool space) {
        const Tokens body = tokenize(d.body);
        auto param_of = [&](const Token &t) -> int {
            if (!d.function_like || t.kind != Kind::identifier) return -1;
            for (std::size_t i = 0; i < d.params.size(); ++i) {
                if (d.params[i] == t.text) return static_cast<int>(i);
            }
            return -1;
        };
        struct Slot {
            Token token;
            int expanded = -1;  // a parameter replaced by its expanded argument
            bool leading_space = false;
        };
        std::vector<Slot> slots;
        for (std::size_t i = 0; i < body.size(); ++i) {
            const Token &t = body[i];
            if (t.kind == Kind::identifier && t.text == "__VA_OPT__") {
                failed_ = true;  // not modelled
                return {};
            }
            if (d.function_like && is_punct(t, "#") && i + 1 < body.size() && param_of(body[i + 1]) >= 0) {
                slots.push_back(Slot{stringize(args[static_cast<std::size_t>(param_of(body[i + 1]))], t.space), -1, false});
                ++i;
                continue;
            }
            if (is_punct(t, "##")) {
                Token op = t;
                op.paste = true;
                slots.push_back(Slot{op, -1, false});
                continue;
            }
            const int p = param_of(t);
            if (p < 0) {
                slots.push_back(Slot{t, -1, false});
                continue;
            }
            const Tokens &arg = args[static_cast<std::size_t>(p)];
            const bool pasted = (i > 0 && is_punct(body[i - 1], "##")) || (i + 1 < body.size() && is_punct(body[i + 1], "##"));
            if (!pasted) {
                slots.push_back(Slot{Token{}, p, t.space});
            } else if (arg.empty()) {
                Token mark;
                mark.kind = Kind::placemarker;
                slots.push_back(Slot{mark, -1, false});
            } else {
                for (std::size_t k = 0; k < arg.size(); ++k) {
                    Token a = arg[k];
                    if (k == 0) a.space = t.space;
                    slots.push_back(Slot{a, -1, false});
                }
            }
        }
        // The ## operators, on the tokens beside them.
        std::vector<Slot> pasted;
        for (std::size_t i = 0; i < slots.size(); ++i) {
            if (!slots[i].token.paste) {
                pasted.push_back(slots[i]);
                continue;
            }
            if (pasted.empty() || i + 1 >= slots.size() || pasted.back().expanded >= 0 || slots[i + 1].expanded >= 0) {
                failed_ = true;  // ill-formed: ## at either end
                return {};
            }
            const Token left = pasted.back().token;
            pasted.pop_back();
            for (Token &g : glue(left, slots[++i].token)) pasted.push_back(Slot{std::move(g), -1, false});
        }
        // Every combination of the expanded arguments' alternatives.
        std::map<int, std::vector<Tokens>> expanded;
        std::vector<Tokens> outs(1);
        for (const Slot &slot : pasted) {
            if (slot.expanded < 0) {
                if (slot.token.kind == Kind::placemarker) continue;
                for (Tokens &o : outs) o.push_back(slot.token);
                continue;
            }
            auto it = expanded.find(slot.expanded);
            if (it == expanded.end()) {
                if (++depth_ > kMaxDepth) {
                    failed_ = true;
                    return {};
                }
                it = expanded.emplace(slot.expanded, expand(args[static_cast<std::size_t>(slot.expanded)])).first;
                --depth_;
                if (failed_) return {};
            }
            // Past the budget as soon as it is: every combination made first could take GBs.
            if (outs.size() * it->second.size() > kMaxAlternatives) {
                failed_ = true;
                return {};
            }
            std::vector<Tokens> next;
            for (const Tokens &o : outs) {
                for (const Tokens &alt : it->second) {
                    Tokens joined = o;
                    for (std::size_t k = 0; k < alt.size(); ++k) {
                        joined.push_back(alt[k]);
                        if (k == 0) joined.back().space = slot.leading_space;
                    }
                    next.push_back(std::move(joined));
                }
            }
            outs = std::move(next);
        }
        for (Tokens &o : outs) {
            if (!o.empty()) o.front().space = space;
            for (Token &t : o) add_hide(t, hs);
        }
        return outs;
    }

    const Table &table_;
    std::size_t steps_ = 0;
    std::size_t copied_ = 0;
    int depth_ = 0;
    bool failed_ = false;
};

// The text before a definition's name parsed: its parameters when function-like. False when
// malformed.
bool parse_definition(std::string_view rest, std::string &name, Definition &d, bool from_option) {
    std::size_t i = 0;
    while (i < rest.size() && is_blank(rest[i])) ++i;
    const std::size_t start = i;
    if (i >= rest.size() || !is_ident_start(static_cast<unsigned char>(rest[i]))) return false;
    while (i < rest.size() && is_ident_char(static_cast<unsigned char>(rest[i]))) ++i;
    name.assign(rest.substr(start, i - start));
    if (i < rest.size() && rest[i] == '(') {
        d.function_like = true;
        const std::size_t close = rest.find(')', i);
        if (close == std::string_view::npos) return false;
        std::string_view list = rest.substr(i + 1, close - i - 1);
        i = close + 1;
        while (!list.empty()) {
            const std::size_t comma = list.find(',');
            std::string_view p = list.substr(0, comma);
            list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
            while (!p.empty() && is_blank(p.front())) p.remove_prefix(1);
            while (!p.empty() && is_blank(p.back())) p.remove_suffix(1);
            if (p.empty()) {
                if (!d.params.empty() || !list.empty()) return false;
                break;
            }
            if (d.variadic) return false;  // ... must be last
            if (p.size() >= 3 && p.substr(p.size() - 3) == "...") {
                d.variadic = true;
                p.remove_suffix(3);
                while (!p.empty() && is_blank(p.back())) p.remove_suffix(1);
                d.params.emplace_back(p.empty() ? std::string_view("__VA_ARGS__") : p);
                continue;
            }
            for (char ch : p) {
                if (!is_ident_char(static_cast<unsigned char>(ch))) return false;
            }
            d.params.emplace_back(p);
        }
    }
    if (from_option) {
        // -DNAME=VALUE; -DNAME is NAME 1.
        if (i >= rest.size()) {
            d.body = "1";
            return true;
        }
        if (rest[i] != '=') return false;
        ++i;
    }
    // ("#define X+1", a name followed by neither blank nor '(': GCC warns and takes the rest as
    // the replacement list, as this does.)
    std::string_view body = rest.substr(std::min(i, rest.size()));
    while (!body.empty() && is_blank(body.front())) body.remove_prefix(1);
    while (!body.empty() && is_blank(body.back())) body.remove_suffix(1);
    d.body.assign(body);
    return true;
}

}  // namespace

bool Definition::operator<(const Definition &o) const {
    return std::tie(function_like, params, variadic, body) < std::tie(o.function_like, o.params, o.variadic, o.body);
}

bool Table::add(std::string name, Definition d) {
    std::vector<Definition> &defs = macros_[name];
    for (const Definition &known : defs) {
        if (!(known < d) && !(d < known)) return false;
    }
    defs.push_back(std::move(d));
    ++count_;
    return true;
}

bool Table::add_directive(std::string_view after_define) {
    std::string name;
    Definition d;
    if (!parse_definition(after_define, name, d, false)) return false;
    return add(std::move(name), std::move(d));
}

bool Table::add_option(std::string_view def) {
    std::string name;
    Definition d;
    if (!parse_definition(def, name, d, true)) return false;
    return add(std::move(name), std::move(d));
}

const std::vector<Definition> *Table::find(const std::string &name) const {
    const auto it = macros_.find(name);
    return it == macros_.end() ? nullptr : &it->second;
}

Expansion header_names(std::string_view operand, const Table &table) {
    Expansion out;
    Expander expander(table);
    const std::vector<Tokens> results = expander.expand(tokenize(operand));
    if (expander.failed()) {
        out.followed = false;
        return out;
    }
    std::set<HeaderName> names;
    for (const Tokens &r : results) {
        // A name NVRTC may predefine, which no file defines: what it stands for is unknown.
        for (const Token &t : r) {
            if (t.kind == Kind::identifier && reserved(t.text) && !table.find(t.text)) {
                out.followed = false;
                return out;
            }
        }
        if (r.empty()) continue;
        const Token &first = r.front();
        if (first.kind == Kind::string && first.text.size() >= 2 && first.text.front() == '"' && first.text.back() == '"') {
            names.insert(HeaderName{first.text.substr(1, first.text.size() - 2), true});
        } else if (is_punct(first, "<")) {
            // The spellings up to the first '>', with a blank where there was whitespace (as GCC
            // combines them; how is implementation-defined, so without blanks too).
            std::string spaced, tight;
            std::size_t i = 1;
            for (; i < r.size() && !is_punct(r[i], ">"); ++i) {
                if (r[i].space && i > 1) spaced += ' ';
                spaced += r[i].text;
                tight += r[i].text;
            }
            if (i < r.size()) {
                names.insert(HeaderName{spaced, false});
                names.insert(HeaderName{tight, false});
            }
        }
        // Anything else is not a header name: NVRTC fails on the directive if it reaches it.
    }
    out.names.assign(names.begin(), names.end());
    return out;
}

}  // namespace kjit::key::include_macros
