// Redis backend: a server that speaks Redis (redis://, rediss://, redis+unix:; Redis 6 and
// later, Valkey, a Redis Cluster found through any of its nodes) as a Backend of the tier
// (backend.hpp). Its class is redis_backend.cpp's own: the tier sees the seam only, and this
// header no hiredis type.
//
// The claim is one Lua script (the entry there: a hit; a shared failure: its text; the lease
// free: SET NX PX, the caller owns it; the holder's unstored marker; else wait), sent in the
// same pipeline as the entry's GET; renewals and releases are compare-and-PEXPIRE and
// compare-and-DEL scripts, entries SET NX.
//
// A full server (maxmemory with maxmemory-policy noeviction) refuses every SET, the lease's
// too. The single flight survives it: (1) the lease scripts run with Redis 7's allow-oom flag
// (a lease is a hundred bytes that expire: they always fit, and Redis allows them past
// maxmemory only in such a flagged script), so nodes still agree on who compiles; (2) a store
// refused for memory makes room by deleting this namespace's least recently used entries
// (sampled with SCAN, ranked by OBJECT IDLETIME, as Redis's own LRU samples; DEL is allowed at
// maxmemory) and tries again, so the holder's entry still reaches the waiters. Only this
// namespace's entries are removed, never another project's keys; where nothing of it is there
// to remove, the store is a refusal (the holder says so in its lease). Said once per process
// as a warning with what to configure (maxmemory-policy allkeys-lru). A server older than
// Redis 7 refuses the flagged scripts: they are then sent without the flag. An ACL that
// refuses SCAN, OBJECT or MEMORY (managed servers) stops the room-making on that server.
#pragma once

#include "storage/remote/backend.hpp"

#include <memory>

namespace kjit::storage::remote::redis_backend {

// The backend of `server` under `config`'s timeouts, sizes and namespace; connects at its first
// operation. Never fails (Result for the scheme table's one signature).
Result<std::unique_ptr<Backend>> make(const Server &server, const Config &config);

}  // namespace kjit::storage::remote::redis_backend
