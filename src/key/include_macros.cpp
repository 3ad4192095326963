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
    bool space = false;             // whitespace before it
    bool paste = false;             // a ## operator of a replacement list
    std::vector<std::string> hide;  // macros it may not expand (the standard's hide set)
};
using Tokens = std::vector<Token>;

bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(unsigned char c) {
    return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
bool is_ident_char(unsigned char c) { return is_ident_start(c) || is_digit(c); }
bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

// Past the whitespace and comments from `i`, setting `space` when there are any; a "//"
// comment ends the line (s.size()).
std::size_t skip_blanks(std::string_view s, std::size_t i, bool &space) {
    while (i < s.size()) {
        if (is_blank(s[i])) {
            space = true;
            ++i;
            continue;
        }
        if (s[i] != '/' || i + 1 >= s.size()) break;
        if (s[i + 1] == '/') return s.size();
        if (s[i + 1] != '*') break;
        const std::size_t end = s.find("*/", i + 2);
        i = end == std::string_view::npos ? s.size() : end + 2;
        space = true;
    }
    return i;
}

// A pp-number starts with a digit, or a '.' before one.
bool starts_number(std::string_view s, std::size_t i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    return is_digit(c) || (c == '.' && i + 1 < s.size() && is_digit(static_cast<unsigned char>(s[i + 1])));
}

// Where the pp-number starting at `i` ends: identifier characters, '.', digit separators, and a
// sign right after an exponent letter (e or p).
std::size_t number_end(std::string_view s, std::size_t i) {
    for (++i; i < s.size(); ++i) {
        const unsigned char d = static_cast<unsigned char>(s[i]);
        const bool exponent_sign = (d == '+' || d == '-') && ((s[i - 1] | 0x20) == 'e' || (s[i - 1] | 0x20) == 'p');
        if (!exponent_sign && !is_ident_char(d) && d != '.' && d != '\'') break;
    }
    return i;
}

// Where the string or character literal opened by the quote at `i` ends (past its closing
// quote, or the line's end when unclosed).
std::size_t literal_end(std::string_view s, std::size_t i) {
    const char quote = s[i];
    ++i;
    while (i < s.size() && s[i] != quote) i += s[i] == '\\' ? 2u : 1u;
    return std::min(i + 1, s.size());
}

// The kind of the token that starts at `i` (not blank), and where it ends.
std::size_t token_end(std::string_view s, std::size_t i, Kind &kind) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (is_ident_start(c)) {
        kind = Kind::identifier;
        ++i;
        while (i < s.size() && is_ident_char(static_cast<unsigned char>(s[i]))) ++i;
        return i;
    }
    if (starts_number(s, i)) {
        kind = Kind::number;
        return number_end(s, i);
    }
    if (c == '"' || c == '\'') {
        kind = Kind::string;
        return literal_end(s, i);
    }
    kind = Kind::punct;  // one character, but ## as one token (the paste operator)
    return c == '#' && i + 1 < s.size() && s[i + 1] == '#' ? i + 2 : i + 1;
}

// Preprocessing tokens of one logical line; comments are whitespace.
Tokens tokenize(std::string_view s) {
    Tokens out;
    bool space = false;
    for (std::size_t i = skip_blanks(s, 0, space); i < s.size(); i = skip_blanks(s, i, space)) {
        Token t;
        t.space = space;
        space = false;
        const std::size_t end = token_end(s, i, t.kind);
        t.text.assign(s.substr(i, end - i));
        out.push_back(std::move(t));
        i = end;
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

// One place of a replacement list once its parameters are known: a token, or a parameter to be
// replaced by its fully expanded argument (whose alternatives are only combined at the end).
struct Slot {
    Token token;
    int expanded = -1;  // a parameter replaced by its expanded argument
    bool leading_space = false;
};
using Slots = std::vector<Slot>;

// The index of the parameter of `d` that `t` names, or -1.
int param_of(const Definition &d, const Token &t) {
    if (!d.function_like || t.kind != Kind::identifier) return -1;
    for (std::size_t i = 0; i < d.params.size(); ++i) {
        if (d.params[i] == t.text) return static_cast<int>(i);
    }
    return -1;
}

// Whether body[i] is an operand of ##: a parameter there takes its argument as written, not
// expanded.
bool beside_paste(const Tokens &body, std::size_t i) {
    return (i > 0 && is_punct(body[i - 1], "##")) || (i + 1 < body.size() && is_punct(body[i + 1], "##"));
}

// Parameter `p` (written as `t`): its expanded argument, or beside ## the argument as written
// (a placemarker when empty, so that ## still has an operand).
void add_parameter(Slots &slots, const Tokens &arg, int p, const Token &t, bool pasted) {
    if (!pasted) {
        slots.push_back(Slot{Token{}, p, t.space});
        return;
    }
    if (arg.empty()) {
        Token mark;
        mark.kind = Kind::placemarker;
        slots.push_back(Slot{mark, -1, false});
        return;
    }
    for (std::size_t k = 0; k < arg.size(); ++k) {
        Token a = arg[k];
        if (k == 0) a.space = t.space;
        slots.push_back(Slot{a, -1, false});
    }
}

// d's replacement list as slots: # applied, ## operators marked, parameters substituted.
// False on __VA_OPT__, which is not modelled.
bool slots_of(const Definition &d, const std::vector<Tokens> &args, Slots &slots) {
    const Tokens body = tokenize(d.body);
    for (std::size_t i = 0; i < body.size(); ++i) {
        const Token &t = body[i];
        if (t.kind == Kind::identifier && t.text == "__VA_OPT__") return false;
        if (d.function_like && is_punct(t, "#") && i + 1 < body.size() && param_of(d, body[i + 1]) >= 0) {
            slots.push_back(
                Slot{stringize(args[static_cast<std::size_t>(param_of(d, body[i + 1]))], t.space), -1, false});
            ++i;
            continue;
        }
        if (is_punct(t, "##")) {
            Token op = t;
            op.paste = true;
            slots.push_back(Slot{op, -1, false});
            continue;
        }
        const int p = param_of(d, t);
        if (p < 0) {
            slots.push_back(Slot{t, -1, false});
            continue;
        }
        add_parameter(slots, args[static_cast<std::size_t>(p)], p, t, beside_paste(body, i));
    }
    return true;
}

// The ## operators applied to the tokens beside them. False when ill-formed: ## at either end
// of the list.
bool apply_pastes(const Slots &slots, Slots &pasted) {
    for (std::size_t i = 0; i < slots.size(); ++i) {
        if (!slots[i].token.paste) {
            pasted.push_back(slots[i]);
            continue;
        }
        if (pasted.empty() || i + 1 >= slots.size() || pasted.back().expanded >= 0 || slots[i + 1].expanded >= 0) {
            return false;
        }
        const Token left = pasted.back().token;
        pasted.pop_back();
        for (Token &g : glue(left, slots[++i].token)) pasted.push_back(Slot{std::move(g), -1, false});
    }
    return true;
}

// Each of `outs` followed by each of `alternatives` in turn; an alternative's first token takes
// the spacing of the parameter it replaces.
std::vector<Tokens> each_followed_by(const std::vector<Tokens> &outs, const std::vector<Tokens> &alternatives,
                                     bool leading_space) {
    std::vector<Tokens> next;
    for (const Tokens &o : outs) {
        for (const Tokens &alt : alternatives) {
            Tokens joined = o;
            for (std::size_t k = 0; k < alt.size(); ++k) {
                joined.push_back(alt[k]);
                if (k == 0) joined.back().space = leading_space;
            }
            next.push_back(std::move(joined));
        }
    }
    return next;
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
                        hs.erase(std::remove_if(hs.begin(), hs.end(),
                                                [&](const std::string &n) { return !hidden(close, n); }),
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
        Slots slots;
        if (!slots_of(d, args, slots)) {
            failed_ = true;  // not modelled
            return {};
        }
        Slots pasted;
        if (!apply_pastes(slots, pasted)) {
            failed_ = true;  // ill-formed: ## at either end
            return {};
        }
        std::vector<Tokens> outs = combine(pasted, args);
        for (Tokens &o : outs) {
            if (!o.empty()) o.front().space = space;
            for (Token &t : o) add_hide(t, hs);
        }
        return outs;
    }

    // Every combination of the expanded arguments' alternatives, with the other slots' tokens
    // between them. Nothing when past a bound (failed_ is then set).
    std::vector<Tokens> combine(const Slots &pasted, const std::vector<Tokens> &args) {
        std::map<int, std::vector<Tokens>> expanded;
        std::vector<Tokens> outs(1);
        for (const Slot &slot : pasted) {
            if (slot.expanded < 0) {
                if (slot.token.kind == Kind::placemarker) continue;
                for (Tokens &o : outs) o.push_back(slot.token);
                continue;
            }
            const std::vector<Tokens> *alternatives = expanded_argument(expanded, args, slot.expanded);
            if (!alternatives) return {};
            // Past the budget as soon as it is: every combination made first could take GBs.
            if (outs.size() * alternatives->size() > kMaxAlternatives) {
                failed_ = true;
                return {};
            }
            outs = each_followed_by(outs, *alternatives, slot.leading_space);
        }
        return outs;
    }

    // Argument `p` fully expanded (each alternative), once per substitution: kept in `memo`.
    // Null when past a bound.
    const std::vector<Tokens> *expanded_argument(std::map<int, std::vector<Tokens>> &memo,
                                                 const std::vector<Tokens> &args, int p) {
        auto it = memo.find(p);
        if (it != memo.end()) return &it->second;
        if (++depth_ > kMaxDepth) {
            failed_ = true;
            return nullptr;
        }
        it = memo.emplace(p, expand(args[static_cast<std::size_t>(p)])).first;
        --depth_;
        if (failed_) return nullptr;
        return &it->second;
    }

    const Table &table_;
    std::size_t steps_ = 0;
    std::size_t copied_ = 0;
    int depth_ = 0;
    bool failed_ = false;
};

// `s` without blanks at either end.
std::string_view trim_blanks(std::string_view s) {
    while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
    return s;
}

// The macro's name, after any blanks at the start of `rest`; `i` then points past it. False
// when no identifier starts there.
bool parse_name(std::string_view rest, std::size_t &i, std::string &name) {
    while (i < rest.size() && is_blank(rest[i])) ++i;
    const std::size_t start = i;
    if (i >= rest.size() || !is_ident_start(static_cast<unsigned char>(rest[i]))) return false;
    while (i < rest.size() && is_ident_char(static_cast<unsigned char>(rest[i]))) ++i;
    name.assign(rest.substr(start, i - start));
    return true;
}

// One parameter `p` (trimmed, not empty) added to d: a name, or the variadic one ("...", or
// "name..." in GCC's spelling). False when malformed.
bool add_param(std::string_view p, Definition &d) {
    if (d.variadic) return false;  // ... must be last
    if (p.size() >= 3 && p.substr(p.size() - 3) == "...") {
        d.variadic = true;
        p.remove_suffix(3);
        while (!p.empty() && is_blank(p.back())) p.remove_suffix(1);
        d.params.emplace_back(p.empty() ? std::string_view("__VA_ARGS__") : p);
        return true;
    }
    for (char ch : p) {
        if (!is_ident_char(static_cast<unsigned char>(ch))) return false;
    }
    d.params.emplace_back(p);
    return true;
}

// The parameter list between the parentheses, into d.params. An empty list is no parameters;
// an empty parameter beside others is malformed (false).
bool parse_params(std::string_view list, Definition &d) {
    while (!list.empty()) {
        const std::size_t comma = list.find(',');
        const std::string_view p = trim_blanks(list.substr(0, comma));
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
        if (p.empty()) return d.params.empty() && list.empty();
        if (!add_param(p, d)) return false;
    }
    return true;
}

// The text before a definition's name parsed: its parameters when function-like. False when
// malformed.
bool parse_definition(std::string_view rest, std::string &name, Definition &d, bool from_option) {
    std::size_t i = 0;
    if (!parse_name(rest, i, name)) return false;
    if (i < rest.size() && rest[i] == '(') {
        d.function_like = true;
        const std::size_t close = rest.find(')', i);
        if (close == std::string_view::npos) return false;
        if (!parse_params(rest.substr(i + 1, close - i - 1), d)) return false;
        i = close + 1;
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
    d.body.assign(trim_blanks(rest.substr(std::min(i, rest.size()))));
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
        if (first.kind == Kind::string && first.text.size() >= 2 && first.text.front() == '"' &&
            first.text.back() == '"') {
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
