// Scenario "relocation": caches that move with the install (issue 47, item 4; docs/cache-layout.md,
// "Folders by number"). A building node compiles kernels whose headers lie under one install
// prefix (WORK/relocation-XXXXXX/prefix-a) into an empty cache and exports it
// (kjit_cache_export); a fresh node, with an empty cache of its own, the export as its seed
// (seed_dirs) and the same files under another prefix (prefix-b), asks for the same kernels.
// Every node is a fresh process (kjit-relocation-node, bench/relocation_node.cpp) that makes one
// kjit_compile_batch with its defaults; NVRTC runs come from its kjit_get_stats, never assumed,
// and time to ready is that call (all N answered). Two sets:
//   header-only tree  the headers scenario's tree (header_tree.hpp: no __FILE__, no assert),
//                     written under each prefix, and its first --relocation-kernels (32) kernels:
//                     the relocated node with the seed and no base folders, against a cold node
//                     under prefix-b with no seed (the ratio)
//   DeepGEMM          the real clients' DeepGEMM set (deepgemm.json in --clients, which
//                     bench/real_clients/prepare.py writes): each tree its include paths name is
//                     put under each prefix as a symbolic link (prefix-X/clients -> the clients
//                     folder, prefix-X/<root> -> the install root of any other, the folder above
//                     its last "include": the CUDA toolkit's) and the manifest rewritten to go
//                     through it; (i) without base folders (CUTLASS, CCCL and DeepGEMM hold
//                     __FILE__ and assert: every kernel is pinned to its folders and compiles),
//                     (ii) with base_dirs {prefix-a} on the building node and {prefix-b} on the
//                     fresh one. Not run, and said, without the manifest.
// With --relocation-before-lib (bash bench/run.sh builds 0.10.0), each set's relocation again on
// that libkjit (LD_LIBRARY_PATH; it has no base_dirs): a build and an export of its own, then the
// fresh node. Everything lives in one temp folder, removed on the way out.
#include "scenarios.hpp"

#include "header_tree.hpp"
#include "progress.hpp"
#include "support.hpp"

#include "kjit/kjit.h"

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace kjit_bench {

namespace {

using Counts = std::map<std::string, double>;

const std::vector<std::string> &node_counts() {
    static const std::vector<std::string> names = {"version",   "kernels", "nvrtc",     "hits",    "misses",
                                                   "seed_hits", "call_us", "export_us", "exported"};
    return names;
}

// One node: its counters, and its process from spawn to exit.
struct NodeRun {
    Counts c;
    double wall_us = 0;
    double nvrtc() const { return c.at("nvrtc"); }
    double ready_us() const { return c.at("call_us"); }
    nlohmann::json json() const {
        nlohmann::json j = {{"wall_us", wall_us}};
        for (const auto &[name, value] : c) j[name == "nvrtc" ? "nvrtc_runs" : name] = value;
        return j;
    }
};

// One relocation: the building node under prefix-a (then its export), the fresh node under
// prefix-b with that export as its seed.
struct Relocated {
    bool run = false;
    NodeRun build, ready;
    nlohmann::json json() const {
        if (!run) return nullptr;
        return {{"build", build.json()}, {"ready", ready.json()}};
    }
};

std::string version_text(double version) {
    const auto v = static_cast<unsigned>(version);
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

struct Nodes {
    std::string node;  // kjit-relocation-node's path
    std::string work;  // the scenario's temp folder
    mutable int serial = 0;

    NodeRun run(const std::string &mode, const std::string &manifest, const std::string &cache, const std::string &seed,
                const std::string &base) const {
        const ChildResult r = run_child({node, mode, manifest, cache, seed, base});
        if (!r.started || r.exit_status != 0) {
            fail("a relocation node (" + mode + ", " + manifest + ", base " + base + ") failed, exit " +
                 std::to_string(r.exit_status) + ": " + r.err);
        }
        NodeRun out;
        out.c = parse_counts(r.out, node_counts(), "a relocation node");
        out.wall_us = r.wall_seconds * 1e6;
        return out;
    }

    // Builds `manifest_a` with base folders `base_a` and exports the cache; then a fresh node asks
    // for `manifest_b` with `base_b` and the export as its seed. Its folders are removed after.
    Relocated relocate(const std::string &manifest_a, const std::string &manifest_b, const std::string &base_a,
                       const std::string &base_b) const {
        const std::string at = work + "/run-" + std::to_string(++serial);
        Relocated out;
        out.run = true;
        out.build = run("build", manifest_a, at + "-cache-a", at + "-seed", base_a);
        out.ready = run("ready", manifest_b, at + "-cache-b", at + "-seed", base_b);
        for (const char *part : {"-cache-a", "-cache-b", "-seed"}) std::filesystem::remove_all(at + part);
        return out;
    }
};

// The relocations of a set run again on the earlier libkjit: the same builds and exports with it.
Relocated relocate_before(const BenchOptions &o, const Nodes &nodes, const std::string &manifest_a,
                          const std::string &manifest_b, unsigned now_version) {
    LibraryPathSwitch library;
    library.use(o.relocation_before_lib);
    Relocated r = nodes.relocate(manifest_a, manifest_b, "-", "-");
    if (static_cast<unsigned>(r.ready.c.at("version")) == now_version) {
        fail("--relocation-before-lib " + o.relocation_before_lib + ": the node loaded this libkjit (" +
             version_text(now_version) + "), not the earlier one");
    }
    return r;
}

// ---- the header-only tree ----------------------------------------------------------------------

struct TreePart {
    int kernels = 0;
    Relocated now, before;
    NodeRun cold;
};

TreePart run_tree(const BenchOptions &o, const Nodes &nodes, const std::string &prefix_a, const std::string &prefix_b,
                  unsigned now_version, Progress &progress) {
    TreePart t;
    t.kernels = o.relocation_kernels;
    const HeaderTree a = write_header_tree(prefix_a + "/header-tree");
    const HeaderTree b = write_header_tree(prefix_b + "/header-tree");
    const std::string folder = nodes.work + "/tree-kernels";
    if (::mkdir(folder.c_str(), 0700) != 0) fail("cannot create '" + folder + "': " + std::strerror(errno));
    std::vector<std::string> sources;
    for (int i = 0; i < t.kernels; ++i) {
        sources.push_back(folder + "/tree_" + std::to_string(i) + ".cu");
        write_file(sources.back(), tree_kernel_source(i));
    }
    const std::string manifest_a = nodes.work + "/tree-a.json", manifest_b = nodes.work + "/tree-b.json";
    write_file(manifest_a, tree_kernel_manifest(a, sources, o.arch).dump(1));
    write_file(manifest_b, tree_kernel_manifest(b, sources, o.arch).dump(1));
    t.now = nodes.relocate(manifest_a, manifest_b, "none", "none");
    progress.tick();
    const std::string cold_cache = nodes.work + "/tree-cold";
    t.cold = nodes.run("ready", manifest_b, cold_cache, "none", "none");
    std::filesystem::remove_all(cold_cache);
    progress.tick();
    if (!o.relocation_before_lib.empty()) {
        t.before = relocate_before(o, nodes, manifest_a, manifest_b, now_version);
        progress.tick();
    }
    return t;
}

// ---- DeepGEMM ----------------------------------------------------------------------------------

std::string real_path(const std::string &path) {
    char resolved[PATH_MAX];
    if (!::realpath(path.c_str(), resolved)) fail("cannot resolve '" + path + "': " + std::strerror(errno));
    return resolved;
}

// The trees a manifest's paths lie in, each put under a prefix by one symbolic link: the clients
// folder (prepare.py's --out: its sources, shims and kernels) as "clients"; any other path's
// install root (the folder above its last "include" component, e.g. the CUDA toolkit's) by that
// root's own name.
class PrefixMap {
public:
    explicit PrefixMap(std::string clients) : clients_(std::move(clients)) {}

    // `path` as it lies under `prefix`, once link_under(prefix) has made the links.
    std::string through(const std::string &prefix, const std::string &path) {
        const std::string real = real_path(path);
        if (real == clients_ || real.compare(0, clients_.size() + 1, clients_ + "/") == 0) {
            add(clients_, "clients");
            return prefix + "/clients" + real.substr(clients_.size());
        }
        std::size_t at = path.rfind("/include");
        while (at != std::string::npos && at + 8 < path.size() && path[at + 8] != '/')
            at = at == 0 ? std::string::npos : path.rfind("/include", at - 1);
        const std::string root = at == std::string::npos || at == 0 ? path : path.substr(0, at);
        return prefix + "/" + add(root, root.substr(root.rfind('/') + 1)) + path.substr(root.size());
    }

    // An NVRTC option that names a path that exists (-I/x, --pre-include=/x/y.h): through the
    // prefix; any other option as it is.
    std::string option_through(const std::string &prefix, const std::string &option) {
        const std::size_t at = option.rfind("-I/", 0) == 0 ? 2 : option.find("=/");
        if (at == std::string::npos) return option;
        const std::size_t path_at = option[at] == '=' ? at + 1 : at;
        if (::access(option.c_str() + path_at, F_OK) != 0) return option;
        return option.substr(0, path_at) + through(prefix, option.substr(path_at));
    }

    void link_under(const std::string &prefix) const {
        if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
            fail("cannot create '" + prefix + "': " + std::strerror(errno));
        for (const Root &r : roots_) {
            const std::string link = prefix + "/" + r.name;
            if (::symlink(r.folder.c_str(), link.c_str()) != 0)
                fail("cannot link '" + link + "' to '" + r.folder + "': " + std::strerror(errno));
        }
    }

    std::string describe() const {
        std::string text;
        for (const Root &r : roots_) text += (text.empty() ? "" : ", ") + r.name + " -> " + r.folder;
        return text;
    }

private:
    struct Root {
        std::string folder, name;
    };

    // The name `folder` has under a prefix: `name`, or with a number where another root has it.
    const std::string &add(const std::string &folder, std::string name) {
        for (const Root &r : roots_) {
            if (r.folder == folder) return r.name;
        }
        for (const Root &r : roots_) {
            if (r.name == name) name += "-" + std::to_string(roots_.size());
        }
        roots_.push_back({folder, name});
        return roots_.back().name;
    }

    std::string clients_;
    std::vector<Root> roots_;
};

// The manifest with its include paths and path options through `prefix`.
nlohmann::json relocated_manifest(nlohmann::json manifest, PrefixMap &map, const std::string &prefix) {
    for (auto &k : manifest["kernels"]) {
        if (!k.contains("include_paths") || !k["include_paths"].is_array() || !k.contains("options") ||
            !k["options"].is_array()) {
            fail("a DeepGEMM kernel of the manifest has no include_paths or options list");
        }
        for (auto &p : k["include_paths"]) p = map.through(prefix, p.get<std::string>());
        for (auto &opt : k["options"]) opt = map.option_through(prefix, opt.get<std::string>());
    }
    return manifest;
}

struct DeepGemmPart {
    std::string why_not;  // "" when run
    int kernels = 0;
    std::string links;  // what each prefix holds
    Relocated plain, based, before;
};

std::string deepgemm_manifest(const BenchOptions &o) { return o.clients_dir + "/deepgemm.json"; }

DeepGemmPart run_deepgemm(const BenchOptions &o, const Nodes &nodes, const std::string &prefix_a,
                          const std::string &prefix_b, unsigned now_version, Progress &progress) {
    DeepGemmPart d;
    const std::string path = deepgemm_manifest(o);
    if (::access(path.c_str(), R_OK) != 0) {
        d.why_not = "no DeepGEMM manifest in " + o.clients_dir +
                    " (bench/real_clients/prepare.py writes it from the pinned sources under $KJIT_BENCH_SOURCES)";
        return d;
    }
    const nlohmann::json manifest = nlohmann::json::parse(read_file(path), nullptr, false);
    if (manifest.is_discarded() || !manifest.contains("kernels") || !manifest["kernels"].is_array() ||
        manifest["kernels"].empty()) {
        fail("'" + path + "' is not a real-clients manifest with kernels");
    }
    d.kernels = static_cast<int>(manifest["kernels"].size());
    PrefixMap map(real_path(o.clients_dir));
    const std::string manifest_a = nodes.work + "/deepgemm-a.json", manifest_b = nodes.work + "/deepgemm-b.json";
    write_file(manifest_a, relocated_manifest(manifest, map, prefix_a).dump(1));
    write_file(manifest_b, relocated_manifest(manifest, map, prefix_b).dump(1));
    map.link_under(prefix_a);
    map.link_under(prefix_b);
    d.links = map.describe();
    d.plain = nodes.relocate(manifest_a, manifest_b, "none", "none");
    progress.tick();
    d.based = nodes.relocate(manifest_a, manifest_b, prefix_a, prefix_b);
    progress.tick();
    if (!o.relocation_before_lib.empty()) {
        d.before = relocate_before(o, nodes, manifest_a, manifest_b, now_version);
        progress.tick();
    }
    return d;
}

// ---- the report --------------------------------------------------------------------------------

std::string runs_of(const NodeRun &r) {
    char text[96];
    std::snprintf(text, sizeof text, "%.0f NVRTC runs of %.0f", r.nvrtc(), r.c.at("kernels"));
    return text;
}

// The row and note of a set's relocated node on the earlier libkjit, when it ran. `set` names
// it in the row ("header-only tree"), `id` in the row's key.
void report_before(const Relocated &before, const std::string &id, const std::string &set,
                   const std::string &before_label, Section &s) {
    if (!before.run) return;
    s.rows.push_back(summarize("relocation." + id + ".seeded_before",
                               set + ": the relocated node on " + before_label + ": " + runs_of(before.ready),
                               {before.ready.ready_us()}));
    s.notes.push_back(set + " on " + before_label + ": relocated with the seed " + format_us(before.ready.ready_us()) +
                      ", " + std::to_string(static_cast<long long>(before.ready.nvrtc())) + " NVRTC runs");
}

void report_tree(const TreePart &t, const std::string &before_label, Section &s) {
    const std::string n = std::to_string(t.kernels);
    s.rows.push_back(summarize("relocation.tree.build",
                               "(info) header-only tree, " + n + " kernels: the building node under prefix-a, " +
                                   runs_of(t.now.build),
                               {t.now.build.ready_us()}));
    s.rows.push_back(
        summarize("relocation.tree.seeded",
                  "header-only tree: fresh node under prefix-b with the seed, no base_dirs: " + runs_of(t.now.ready),
                  {t.now.ready.ready_us()}));
    s.rows.push_back(summarize("relocation.tree.cold",
                               "header-only tree: fresh node under prefix-b, no seed (cold): " + runs_of(t.cold),
                               {t.cold.ready_us()}));
    char note[512];
    std::snprintf(note, sizeof note,
                  "header-only tree, %d kernels: relocated with the seed %s (%.0f NVRTC runs, %.0f seed hits; %s spawn "
                  "to exit), cold %s (%.0f NVRTC runs): cold / seeded = %.1fx",
                  t.kernels, format_us(t.now.ready.ready_us()).c_str(), t.now.ready.nvrtc(),
                  t.now.ready.c.at("seed_hits"), format_us(t.now.ready.wall_us).c_str(),
                  format_us(t.cold.ready_us()).c_str(), t.cold.nvrtc(), t.cold.ready_us() / t.now.ready.ready_us());
    s.notes.push_back(note);
    report_before(t.before, "tree", "header-only tree", before_label, s);
}

void report_deepgemm(const DeepGemmPart &d, const std::string &before_label, Section &s) {
    if (!d.why_not.empty()) {
        s.notes.push_back("DeepGEMM: not run: " + d.why_not);
        return;
    }
    const std::string n = std::to_string(d.kernels);
    s.rows.push_back(
        summarize("relocation.deepgemm.build",
                  "(info) DeepGEMM, " + n + " kernels: the building node under prefix-a, " + runs_of(d.plain.build),
                  {d.plain.build.ready_us()}));
    s.rows.push_back(
        summarize("relocation.deepgemm.plain",
                  "DeepGEMM: fresh node under prefix-b with the seed, no base_dirs: " + runs_of(d.plain.ready),
                  {d.plain.ready.ready_us()}));
    s.rows.push_back(
        summarize("relocation.deepgemm.base_dirs",
                  "DeepGEMM: the same, base_dirs {prefix-a} building, {prefix-b} fresh: " + runs_of(d.based.ready),
                  {d.based.ready.ready_us()}));
    char note[768];
    std::snprintf(note, sizeof note,
                  "DeepGEMM, %d kernels: relocated without base_dirs %s (%.0f NVRTC runs), with base_dirs %s (%.0f "
                  "NVRTC runs, %.0f seed hits): %.1fx; the prefixes hold %s",
                  d.kernels, format_us(d.plain.ready.ready_us()).c_str(), d.plain.ready.nvrtc(),
                  format_us(d.based.ready.ready_us()).c_str(), d.based.ready.nvrtc(), d.based.ready.c.at("seed_hits"),
                  d.plain.ready.ready_us() / d.based.ready.ready_us(), d.links.c_str());
    s.notes.push_back(note);
    report_before(d.before, "deepgemm", "DeepGEMM (no base_dirs)", before_label, s);
}

void add_targets(const TreePart &t, const DeepGemmPart &d, Report &report) {
    Target tree{"relocation_tree_nvrtc_runs",
                "relocation: NVRTC runs of a fresh node under another prefix with the seed (header-only tree, no "
                "base_dirs)",
                0.0, true, TargetUnit::count};
    tree.value = t.now.ready.nvrtc();
    report.add_target(tree);
    Target based{"relocation_deepgemm_base_dirs_nvrtc_runs",
                 "relocation: NVRTC runs of a fresh node under another prefix with the seed (DeepGEMM, base_dirs)", 0.0,
                 true, TargetUnit::count};
    Target pinned{"relocation_deepgemm_pinned_without_base_dirs",
                  "relocation: DeepGEMM without base_dirs compiles every kernel (pinned to its folders: no hit across "
                  "prefixes)",
                  1, false, TargetUnit::yes_no};
    if (d.why_not.empty()) {
        based.value = d.based.ready.nvrtc();
        pinned.value = d.plain.ready.nvrtc() == d.kernels ? 1 : 0;
    } else {
        based.available = pinned.available = false;
        based.why_unavailable = pinned.why_unavailable = "not run: " + d.why_not;
    }
    report.add_target(based);
    report.add_target(pinned);
}

}  // namespace

void run_relocation(const BenchOptions &o, Report &report) {
    if (o.relocation_kernels > tree_kernel_count())
        fail("--relocation-kernels is at most " + std::to_string(tree_kernel_count()));
    const std::string self = self_executable();
    TempDir work(o.work_dir, "relocation-");
    const Nodes nodes{folder_of(self) + "/kjit-relocation-node", work.path()};
    const std::string prefix_a = work.path() + "/prefix-a", prefix_b = work.path() + "/prefix-b";
    const unsigned now_version = kjit_version();
    const bool before = !o.relocation_before_lib.empty();
    const bool deepgemm = ::access(deepgemm_manifest(o).c_str(), R_OK) == 0;
    TreePart tree;
    DeepGemmPart dg;
    {
        Progress progress("relocation: " + std::to_string(o.relocation_kernels) + " header-only kernels" +
                              (deepgemm ? " and DeepGEMM" : "") + " built under one prefix, ready under another" +
                              (before ? ", this libkjit and an earlier one" : ""),
                          (deepgemm ? 2 : 1) * (before ? 3 : 2), "relocations");
        tree = run_tree(o, nodes, prefix_a, prefix_b, now_version, progress);
        dg = run_deepgemm(o, nodes, prefix_a, prefix_b, now_version, progress);
    }
    const double before_version = tree.before.run ? tree.before.ready.c.at("version") : 0;
    const std::string before_label = before ? version_text(before_version) : "";

    Section &s =
        report.section("relocation",
                       "a cache built under one install prefix and exported; a fresh node (an empty cache, the "
                       "export as its seed) under another prefix with the same files: time to ready (one "
                       "kjit_compile_batch) and NVRTC runs");
    report_tree(tree, before_label, s);
    report_deepgemm(dg, before_label, s);
    if (!before) {
        s.notes.push_back("no earlier libkjit: bash bench/run.sh builds 0.10.0 from git history (none here), or pass "
                          "--relocation-before-lib");
    }
    add_targets(tree, dg, report);

    nlohmann::json meta = {{"kernels", tree.kernels},
                           {"arch", o.arch},
                           {"before_version", before ? before_label : ""},
                           {"tree",
                            {{"now", tree.now.json()}, {"cold", tree.cold.json()}, {"before", tree.before.json()}}}};
    if (dg.why_not.empty()) {
        meta["deepgemm"] = {{"kernels", dg.kernels},
                            {"links", dg.links},
                            {"plain", dg.plain.json()},
                            {"base_dirs", dg.based.json()},
                            {"before", dg.before.json()}};
    } else {
        meta["deepgemm"] = {{"not_run", dg.why_not}};
    }
    report.meta["relocation"] = meta;
}

}  // namespace kjit_bench
