#include "report.hpp"

#include "support.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <unistd.h>

namespace kjit_bench {

const Row *Section::find(const std::string &row_id) const {
    for (const Row &r : rows) {
        if (r.id == row_id) return &r;
    }
    return nullptr;
}

Section &Report::section(const std::string &id, const std::string &title) {
    for (Section &s : sections_) {
        if (s.id == id) return s;
    }
    sections_.push_back(Section{id, title, {}, {}});
    return sections_.back();
}

const Section *Report::find_section(const std::string &id) const {
    for (const Section &s : sections_) {
        if (s.id == id) return &s;
    }
    return nullptr;
}

std::string json_string(const nlohmann::json &j, const char *key, const std::string &fallback) {
    if (!j.is_object() || !j.contains(key)) return fallback;
    const nlohmann::json &v = j[key];
    return v.is_string() ? v.get<std::string>() : fallback;
}

double json_number(const nlohmann::json &j, const char *key, double fallback) {
    if (!j.is_object() || !j.contains(key)) return fallback;
    const nlohmann::json &v = j[key];
    return v.is_number() ? v.get<double>() : fallback;
}

std::string format_us(double us) {
    char buf[32];
    if (std::isnan(us)) return "-";
    const double a = std::fabs(us);
    if (a < 100) std::snprintf(buf, sizeof buf, "%.2f us", us);
    else if (a < 10'000) std::snprintf(buf, sizeof buf, "%.0f us", us);
    else if (a < 1e6) std::snprintf(buf, sizeof buf, "%.1f ms", us / 1e3);
    else std::snprintf(buf, sizeof buf, "%.2f s", us / 1e6);
    return buf;
}

namespace {

std::string format_ratio(double x) {
    char buf[32];
    if (std::isnan(x)) return "-";
    if (x >= 100) std::snprintf(buf, sizeof buf, "%.0fx", x);
    else std::snprintf(buf, sizeof buf, "%.2fx", x);
    return buf;
}

std::string format_target_value(double x, TargetUnit unit) {
    char buf[32];
    if (std::isnan(x)) return "-";
    switch (unit) {
        case TargetUnit::ratio: return format_ratio(x);
        case TargetUnit::seconds: std::snprintf(buf, sizeof buf, "%.3f s", x); return buf;
        case TargetUnit::microseconds: std::snprintf(buf, sizeof buf, "%.2f us", x); return buf;
        case TargetUnit::yes_no: return x >= 0.5 ? "yes" : "no";
        case TargetUnit::count: std::snprintf(buf, sizeof buf, x == std::floor(x) ? "%.0f" : "%.2f", x); return buf;
    }
    return "-";
}

const char *unit_name(TargetUnit unit) {
    switch (unit) {
        case TargetUnit::ratio: return "ratio";
        case TargetUnit::seconds: return "seconds";
        case TargetUnit::microseconds: return "microseconds";
        case TargetUnit::yes_no: return "yes_no";
        case TargetUnit::count: return "count";
    }
    return "ratio";
}

nlohmann::json number_or_null(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

}  // namespace

void Report::print_summary(std::FILE *out) const {
    // One label column for the whole table, as wide as the widest label.
    int width = 40;
    for (const Section &s : sections_) {
        for (const Row &r : s.rows) width = std::max(width, static_cast<int>(r.label.size()));
    }
    for (const Target &t : targets_) width = std::max(width, static_cast<int>(t.text.size()) - 2);
    for (const Section &s : sections_) {
        std::fprintf(out, "\n== %s ==\n", s.title.c_str());
        std::fprintf(out, "%-*s %11s %11s %11s %8s\n", width, "", "median", "p10", "p90", "samples");
        for (const Row &r : s.rows) {
            if (r.skipped) {
                std::fprintf(out, "%-*s skipped: %s\n", width, r.label.c_str(), r.reason.c_str());
                continue;
            }
            std::fprintf(out, "%-*s %11s %11s %11s %8ld\n", width, r.label.c_str(), format_us(r.median_us).c_str(),
                         format_us(r.p10_us).c_str(), format_us(r.p90_us).c_str(), r.samples);
        }
        for (const std::string &n : s.notes) std::fprintf(out, "  %s\n", n.c_str());
    }
    std::fprintf(out, "\n== targets (goals for the code; reported, never asserted) ==\n");
    for (const Target &t : targets_) {
        if (!t.available) {
            std::fprintf(out, "  %-*s %11s   not measured: %s\n", width - 2, t.text.c_str(), "-",
                         t.why_unavailable.c_str());
            continue;
        }
        const std::string value = format_target_value(t.value, t.unit), goal = format_target_value(t.goal, t.unit);
        if (t.unit == TargetUnit::yes_no) {
            std::fprintf(out, "  %-*s %11s   target %-11s %s\n", width - 2, t.text.c_str(), value.c_str(), goal.c_str(),
                         t.met() ? "met" : "MISSED");
        } else {
            std::fprintf(out, "  %-*s %11s   target %s %-8s %s\n", width - 2, t.text.c_str(), value.c_str(),
                         t.at_most ? "<=" : ">=", goal.c_str(), t.met() ? "met" : "MISSED");
        }
    }
}

nlohmann::json Report::to_json() const {
    nlohmann::json j = meta;
    nlohmann::json sections = nlohmann::json::array();
    for (const Section &s : sections_) {
        nlohmann::json rows = nlohmann::json::array();
        for (const Row &r : s.rows) {
            nlohmann::json row = {{"id", r.id}, {"label", r.label}, {"skipped", r.skipped}};
            if (r.skipped) {
                row["reason"] = r.reason;
            } else {
                row["samples"] = r.samples;
                row["median_us"] = number_or_null(r.median_us);
                row["p10_us"] = number_or_null(r.p10_us);
                row["p90_us"] = number_or_null(r.p90_us);
            }
            rows.push_back(std::move(row));
        }
        sections.push_back({{"id", s.id}, {"title", s.title}, {"rows", std::move(rows)}, {"notes", s.notes}});
    }
    j["scenarios"] = std::move(sections);
    nlohmann::json targets = nlohmann::json::object();
    bool all_met = true;
    for (const Target &t : targets_) {
        all_met = all_met && t.met();
        if (!t.available) {
            targets[t.key] = {{"text", t.text}, {"available", false}, {"reason", t.why_unavailable}};
            continue;
        }
        targets[t.key] = {{"text", t.text},
                          {"available", true},
                          {"value", number_or_null(t.value)},
                          {"goal", t.goal},
                          {"bound", t.at_most ? "max" : "min"},
                          {"met", t.met()},
                          {"unit", unit_name(t.unit)}};
    }
    j["targets"] = std::move(targets);
    j["all_targets_met"] = all_met;
    nlohmann::json per_kernel = nlohmann::json::array();
    for (const KernelPoint &k : this->kernels) {
        per_kernel.push_back({{"index", k.index},
                              {"config", k.config},
                              {"raw_nvrtc_us", number_or_null(k.raw_nvrtc_us)},
                              {"cold_1t_us", number_or_null(k.cold_1t_us)},
                              {"cold_2t_us", number_or_null(k.cold_2t_us)},
                              {"hit_us", number_or_null(k.hit_us)},
                              {"resolve_us", number_or_null(k.resolve_us)},
                              {"prepare_us", number_or_null(k.prepare_us)},
                              {"load_us", number_or_null(k.load_us)}});
    }
    j["sweep_kernels"] = std::move(per_kernel);
    return j;
}

namespace {

// Writes `text` to `path` through a temp file renamed over it: a reader never sees half a file.
void publish_file(const std::string &path, const std::string &text) {
    const std::string temp = path + ".tmp-" + std::to_string(::getpid());
    write_file(temp, text);
    if (std::rename(temp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        std::remove(temp.c_str());
        fail("cannot rename '" + temp + "' to '" + path + "': " + std::strerror(e));
    }
}

std::string stem_of(const std::string &path) {
    const std::size_t slash = path.rfind('/');
    const std::size_t dot = path.rfind('.');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path;
    return path.substr(0, dot);
}

// gnuplot string literal: single quotes, a quote doubled.
std::string gp_quote(const std::string &s) {
    std::string out = "'";
    for (const char c : s) {
        out += c;
        if (c == '\'') out += '\'';
    }
    return out + "'";
}

// Short names for the resolve chart's bars.
std::string chart_label(const std::string &row_id) {
    static const std::pair<const char *, const char *> names[] = {{"resolve.hit", "sidecar hit"},
                                                                  {"resolve.hit_read", "first hit"},
                                                                  {"resolve.floor", "floor"},
                                                                  {"resolve.syscalls", "hit syscalls"},
                                                                  {"resolve.scan", "scan"},
                                                                  {"resolve.scan_rewrite", "scan+publish"},
                                                                  {"resolve.pyelftools", "pyelftools"},
                                                                  {"cluster.cold_tier", "cold start, tier"},
                                                                  {"cluster.cold_none", "cold start, none"},
                                                                  {"cluster.join_hit", "new node: remote hit"},
                                                                  {"cluster.join_compile", "new node: compile"},
                                                                  {"cluster.warm_local", "local hit"}};
    for (const auto &n : names) {
        if (row_id == n.first) return n.second;
    }
    return row_id;
}

}  // namespace

void Report::write_json(const std::string &path) const { publish_file(path, to_json().dump(2) + "\n"); }

std::string Report::write_chart(const std::string &png_path) const {
    const std::string gnuplot = find_on_path("gnuplot");
    if (gnuplot.empty()) return "gnuplot is not installed (Debian: apt-get install gnuplot-nox)";
    // The chart draws the sweep's kernels (and the resolve rows beside them): a run without the
    // sweep (--only headers) has nothing for its first panel, and gnuplot fails on empty data.
    if (kernels.empty())
        return "nothing to draw: the chart shows the sweep's kernels (run it without --only, or add sweep)";
    const std::string stem = stem_of(png_path);
    const std::string kernels_dat = stem + ".kernels.dat", resolve_dat = stem + ".resolve.dat", script = stem + ".gp";

    // Per kernel, ordered by cold compile time so the chart reads as a curve; times in us.
    std::vector<KernelPoint> sorted = kernels;
    std::sort(sorted.begin(), sorted.end(),
              [](const KernelPoint &a, const KernelPoint &b) { return a.cold_1t_us < b.cold_1t_us; });
    std::string data =
        "# rank index raw_nvrtc_us cold_1t_us hit_us resolve_us load_us prepare_us (NaN: not measured)\n";
    char line[256];
    for (std::size_t i = 0; i < sorted.size(); ++i) {
        const KernelPoint &k = sorted[i];
        std::snprintf(line, sizeof line, "%zu %d %.3f %.3f %.3f %.3f %.3f %.3f\n", i + 1, k.index, k.raw_nvrtc_us,
                      k.cold_1t_us, k.hit_us, k.resolve_us, k.load_us, k.prepare_us);
        data += line;
    }
    publish_file(kernels_dat, data);

    std::string resolve = "# position median_us p10_us p90_us label\n";
    const Section *rs = find_section("resolve");
    int position = 0;
    if (rs) {
        for (const Row &r : rs->rows) {
            if (r.skipped) continue;
            const std::string label = chart_label(r.id);
            std::snprintf(line, sizeof line, "%d %.3f %.3f %.3f \"", position++, r.median_us, r.p10_us, r.p90_us);
            resolve += line + label + "\"\n";
        }
    }
    publish_file(resolve_dat, resolve);

    // The cluster tier's rows, when the scenario ran: a third panel.
    const std::string cluster_dat = stem + ".cluster.dat";
    std::string cluster = "# position median_us p10_us p90_us label\n";
    const Section *cs = find_section("cluster");
    int cluster_bars = 0;
    if (cs) {
        for (const Row &r : cs->rows) {
            if (r.skipped || r.id == "cluster.join_per_mb") continue;
            std::snprintf(line, sizeof line, "%d %.3f %.3f %.3f \"", cluster_bars++, r.median_us, r.p10_us, r.p90_us);
            cluster += line + chart_label(r.id) + "\"\n";
        }
        publish_file(cluster_dat, cluster);
    }

    const std::string title = json_string(meta, "machine", "unknown machine");
    const bool have_load =
        std::any_of(kernels.begin(), kernels.end(), [](const KernelPoint &k) { return !std::isnan(k.load_us); });
    std::string gp;
    // The sweep's panel, the resolve rows' and the cluster rows', where there are any.
    const int panels = 1 + (position > 0 ? 1 : 0) + (cluster_bars > 0 ? 1 : 0);
    gp += "set terminal pngcairo size " + std::to_string(std::max(panels, 2) * 800) + ",720 font ',10'\n";
    gp += "set output " + gp_quote(png_path) + "\n";
    gp += "set multiplot layout 1," + std::to_string(std::max(panels, 2)) + " title " +
          gp_quote("libkjit bench: " + title) + "\n";
    gp += "set logscale y\nset grid ytics mytics\nset format y '10^{%L}'\nset key top left box opaque\n";
    gp += "set title 'tuning sweep: cold vs warm, per kernel (sorted by cold time)'\n";
    gp += "set xlabel 'kernel (rank by cold kjit\\_compile time)'\nset ylabel 'microseconds per kernel (log)'\n";
    gp += "plot " + gp_quote(kernels_dat) +
          " using 1:4 with points pt 7 ps 0.5 lc rgb '#d62728' title 'cold kjit\\_compile (miss)', \\\n";
    gp += "     '' using 1:3 with points pt 6 ps 0.5 lc rgb '#ff7f0e' title 'raw NVRTC', \\\n";
    gp += "     '' using 1:5 with points pt 7 ps 0.5 lc rgb '#1f77b4' title 'warm kjit\\_compile (hit)', \\\n";
    gp += "     '' using 1:6 with points pt 7 ps 0.5 lc rgb '#2ca02c' title 'warm kjit\\_resolve\\_name'";
    if (have_load)
        gp += ", \\\n     '' using 1:7 with points pt 7 ps 0.5 lc rgb '#9467bd' title 'warm kjit\\_load\\_cached'";
    gp += "\n";
    const int symbols = static_cast<int>(
        json_number(meta.contains("resolve") ? meta["resolve"] : nlohmann::json(), "function_symbols", 0));
    gp += "set title 'resolving one kernel name in a cubin of " + std::to_string(symbols) +
          " functions (median, bars p10-p90)'\n";
    gp += "set xlabel ''\nset ylabel 'microseconds per lookup (log)'\nunset key\n";
    gp += "set style fill solid 0.6\nset boxwidth 0.6\nset xtics rotate by -25 left\nset xrange [-0.6:" +
          std::to_string(std::max(position, 1)) + "-0.4]\nset yrange [1:*]\n";
    if (position > 0) {
        gp += "plot " + gp_quote(resolve_dat) + " using 1:2:xtic(5) with boxes lc rgb '#1f77b4', \\\n";
        gp += "     '' using 1:2:3:4 with yerrorbars lc rgb 'black' pt 0, \\\n";
        gp += "     '' using 1:($4*1.4):($2 >= 1e5 ? sprintf('%.0f ms', $2 / 1e3) : sprintf('%.3g us', $2)) with "
              "labels\n";
    }
    if (cluster_bars > 0) {
        gp += "set title 'cluster tier: all nodes cold at once, then a new node (median, bars p10-p90)'\n";
        gp += "set ylabel 'microseconds (log): cold start in total, new node per kernel'\n";
        gp += "set xrange [-0.6:" + std::to_string(cluster_bars) + "-0.4]\nset yrange [1:*]\n";
        gp += "plot " + gp_quote(cluster_dat) + " using 1:2:xtic(5) with boxes lc rgb '#2ca02c', \\\n";
        gp += "     '' using 1:2:3:4 with yerrorbars lc rgb 'black' pt 0, \\\n";
        gp += "     '' using 1:($4*1.4):($2 >= 1e6 ? sprintf('%.2f s', $2 / 1e6) : $2 >= 1e3 ? sprintf('%.1f ms', $2 / "
              "1e3) : "
              "sprintf('%.3g us', $2)) with labels\n";
    }
    gp += "unset multiplot\n";
    publish_file(script, gp);

    const ChildResult r = run_child({gnuplot, script});
    if (!r.started) return r.err;
    if (r.exit_status != 0) return "gnuplot failed (exit " + std::to_string(r.exit_status) + "): " + r.err;
    if (read_file(png_path).empty()) return "gnuplot wrote no " + png_path + ": " + r.err;
    return "";
}

}  // namespace kjit_bench
