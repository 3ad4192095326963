// The bench's results: rows by scenario, targets, the summary table, --json and the chart.
#pragma once

#include "stats.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace kjit_bench {

// What a target's value is: a ratio ("2.50x"), a time in seconds ("0.312 s"), a count ("0",
// "1.25": runs, hits, commands), or whether something happened (1 yes, 0 no; the goal is yes).
enum class TargetUnit { ratio, seconds, microseconds, yes_no, count };

// A goal from the issue that filed the bench, checked against this run (never asserted).
struct Target {
    Target(std::string key_, std::string text_, double goal_, bool at_most_ = false,
           TargetUnit unit_ = TargetUnit::ratio)
        : key(std::move(key_)), text(std::move(text_)), goal(goal_), at_most(at_most_), unit(unit_) {}
    std::string key;   // JSON key
    std::string text;  // for people
    double goal = 0;
    bool at_most = false;  // goal is an upper bound
    TargetUnit unit = TargetUnit::ratio;
    double value = 0;
    bool available = true;
    std::string why_unavailable;
    bool met() const { return available && (at_most ? value <= goal : value >= goal); }
};

struct Section {
    std::string id;
    std::string title;
    std::vector<Row> rows;
    std::vector<std::string> notes;  // printed under the rows: ratios and figures that are not rows
    const Row *find(const std::string &row_id) const;
};

// One kernel of the tuning sweep, for the per-kernel chart and JSON (times in microseconds;
// NaN where not measured).
struct KernelPoint {
    int index = 0;
    std::string config;
    double raw_nvrtc_us = 0, cold_1t_us = 0, cold_2t_us = 0;
    double hit_us = 0, resolve_us = 0, prepare_us = 0, load_us = 0;
};

class Report {
public:
    nlohmann::json meta = nlohmann::json::object();  // machine, versions, settings
    std::vector<KernelPoint> kernels;

    Section &section(const std::string &id, const std::string &title);
    const Section *find_section(const std::string &id) const;
    void add_target(Target t) { targets_.push_back(std::move(t)); }

    void print_summary(std::FILE *out) const;
    nlohmann::json to_json() const;
    // Writes the JSON to `path` (atomically: a temp file renamed over it).
    void write_json(const std::string &path) const;
    // Writes a PNG chart with gnuplot: warm vs cold per kernel, and the resolve paths. Its data
    // and script go beside it (<stem>.kernels.dat, <stem>.resolve.dat, <stem>.gp). Returns ""
    // on success, else why there is no chart (gnuplot missing, or what it said).
    std::string write_chart(const std::string &png_path) const;

private:
    std::vector<Section> sections_;
    std::vector<Target> targets_;
};

// j[key] as a string or a number, else `fallback`. (Not json::value(): GCC 12 reports a false
// -Wnull-dereference inside it.)
std::string json_string(const nlohmann::json &j, const char *key, const std::string &fallback);
double json_number(const nlohmann::json &j, const char *key, double fallback);

// "6.13 us", "95.2 ms", "11.0 s": three significant figures or so, unit by magnitude.
std::string format_us(double us);

}  // namespace kjit_bench
