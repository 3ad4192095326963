// Every name libkjit gives a file or folder inside a cache folder, in one place
// (docs/cache-layout.md draws the tree). The store part owns the cache folder: the parts that
// write one of these files (the NVRTC probe's record, compile/) take its name from here, and the
// inventory tells libkjit's own files from anything else by this list alone, so a name added
// for a new file cannot be missed by the walk that sweeps and summarizes the folder.
#pragma once

#include <string_view>

namespace kjit::store::cache_layout {

// ---- At the top of the cache folder ----

// The removers' lock (cache_inventory.hpp): prune, clear and verify --fix take it.
constexpr const char *kRemoversLockFile = ".kjit-lock";
// The usage record (cache_eviction.cpp writes it) and its temp files.
constexpr const char *kUsageFile = ".kjit-usage";
constexpr std::string_view kUsageTempPrefix = ".kjit-usage.tmp-";
// The compile lock (compile_lock.hpp): one byte range per key.
constexpr const char *kCompileLockFile = ".kjit-compile-lock";
// The records of the probes of NVRTC and nvJitLink (compile/library_probe.hpp):
// "<prefix><euid>-<XXH3-128 in hex>", each written through a temp file "<record>.tmp-<random>".
constexpr std::string_view kNvrtcRecordPrefix = ".kjit-nvrtc-";
constexpr std::string_view kNvJitLinkRecordPrefix = ".kjit-nvjitlink-";
constexpr std::string_view kRecordTempInfix = ".tmp-";
// What NVRTC's precompiled headers cost and saved per header identity (cache/pch_price.hpp), and
// its temp files.
constexpr const char *kPchPricesFile = ".kjit-pch-prices";
constexpr std::string_view kPchPricesTempPrefix = ".kjit-pch-prices.tmp-";

// ---- In a shard "<cache>/<key[0..2]>" ----

// Entries in transit: being published, or retired before removal; never mistaken for entries.
constexpr std::string_view kTempPrefix = ".tmp-";
constexpr std::string_view kTrashPrefix = ".trash-";
// A source key's variants file: "<source key>.variants" (cache_entry.hpp says what it holds).
constexpr std::string_view kVariantsSuffix = ".variants";

// ---- In an entry folder "<cache>/<key[0..2]>/<key>" ----

constexpr const char *kCubinFile = "kernel.cubin";
constexpr const char *kSourceFile = "source.cu";
constexpr const char *kManifestFile = "manifest.txt";
constexpr const char *kDepsFile = "deps.txt";
// Where deps.txt's relative records were proven (key::include_scanner::origin); since 0.15, and
// optional: without it, or for another place, those records are compared by content.
constexpr const char *kOriginFile = "origin.txt";
// The temp files deps.txt and origin.txt are replaced through (a check that refreshed them).
constexpr std::string_view kDepsTempPrefix = ".deps.tmp-";

}  // namespace kjit::store::cache_layout
