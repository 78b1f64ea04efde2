// redis/scripts.hpp: the Lua scripts (redis/lua/*.lua) that are the Redis backend's only way
// to change a semaphore. Each state change is one script, so it is atomic
// on the server. The scripts are the functions of one Lua library (Redis
// 7's FUNCTION LOAD), which the client loads on a server that lacks it and
// then calls with FCALL: the code they share (the prelude) runs once per
// server, not at every call, as an EVAL script's would. A semaphore is a fixed set of keys (keys()
// below), all starting with its main key "shmsem{KEY}", so in a cluster they share one slot; every
// script is given all of them as KEYS and touches no other. While a slot is being resharded, a node
// that lacks any of them refuses the whole script (ASK, or TRYAGAIN, which the client retries), so
// a script never runs on half a semaphore. For the same reason each hash and sorted set keeps a
// placeholder member "." (a zset's at score +inf) and never becomes empty: an empty key does not
// exist, and would hold every script back for the whole migration.
//
// What is stored (format "shmsem-redis/5"), all under the hash tag {KEY}:
//   shmsem{KEY}            hash: format, epoch, created, about; `state`,
//                          little-endian doubles: cap, used, seq (the last
//                          lease or waiter id: ids are fencing tokens, the
//                          server's time in us or the last id + 1), queued,
//                          ttls, idlers, marks, sdue (no session deadline
//                          is earlier; 0: unknown), the EWMA and its time,
//                          acquired, released, the wait and hold sums,
//                          w0 (waits of acquires granted at once), then
//                          the epoch; the other histogram buckets (w1..w12,
//                          h0..h12) and the rarer counters as decimal fields
//   shmsem{KEY}:leases     hash: lease id -> "sid|weight|granted_us|expires_us|pid|request|host"
//   shmsem{KEY}:expiry     zset: lease id -> expiry (leases with a TTL only)
//   shmsem{KEY}:sessions   zset: session id -> deadline; a session whose
//                          deadline passed is dead, with its leases and waits
//   shmsem{KEY}:queue      zset: waiter id -> waiter id (FIFO)
//   shmsem{KEY}:waiters    hash: waiter id -> "Q|sid|n|ttl_ms|enqueued_us|pid|request|host",
//                          then "G|sid|lease id|request" (granted) or "R|sid" (rejected)
//   shmsem{KEY}:idle       hash: session id -> wait_idle() callers
//   shmsem{KEY}:own        hash: session id -> "l<id> w<id> ...", what it owns
//   shmsem{KEY}:marks      hash, each field kept an hour: "l<id>" -> why lease
//                          <id> ended without release; "v<REQ>" -> acquire
//                          request REQ must grant nothing
//   shmsem{KEY}:marks-due  zset: field of :marks -> when it goes (us)
// Times are the server's (TIME), in microseconds, so clients' clocks never
// matter. Grants are published on "shmsem{KEY}:ev:SID" (the waiter's
// session) as "g<wid>:<lease>" and "r<wid>"; "shmsem{KEY}:ev-idle" hears
// "i" when the last seat is freed while someone waits for idle.
//
// Each script returns an array whose first element says what happened;
// "absent" (no such semaphore), "garbage" (the main key is a hash that is
// not ours), "format" (a semaphore stored in another format, which follows
// the key) and "wrongtype" (a key holds another Redis type; the key and
// its type follow) can come from any of them, and nothing is written then.
#pragma once

#include "redis/client.hpp"

namespace shmsem::detail::redis::scripts {

/// Every key of the semaphore whose main key is `meta` ("shmsem{KEY}"):
/// the KEYS of each script, in the order the scripts expect.
std::vector<std::string> keys(const std::string& meta);

/// ARGV: create_cap (0: do not create), new_epoch.
/// -> {"ok"|"created", epoch, cap} | {"absent"}
const script& open();
/// ARGV: create_cap, new_epoch, sid, session_ms, n, ttl_ms, pid, host,
/// mode ("wait", "try", or "once": no wait, counted as a timeout), request
/// (a random id; see renew's voids).
/// -> {"ok", epoch, lease id, cap, used} | {"queued", epoch, waiter id, cap,
/// used, ms to the next lease expiry or -1} | {"full", epoch, cap, used} |
/// {"exceeds", epoch, cap, used} | {"void"} (the request was voided)
const script& acquire();
/// ARGV: epoch, sid, session_ms, lease id.
/// -> {"ok", used, cap} | {"lost", why, used, cap}
const script& release();
/// ARGV: epoch, sid, session_ms, lease id, ttl_ms. -> {"ok"} | {"lost", why}
const script& extend();
/// ARGV: epoch, lease id. Writes nothing. -> {"ok"} | {"lost", why}
const script& held();
/// The session's heartbeat. ARGV: epoch, sid, session_ms, then counted
/// lists: acquire requests that got no reply (voided: whatever they got is
/// given back, and if they run later they get nothing), releases to retry
/// (lease ids), waits given up (waiter ids: a grant they got is given
/// back), grants taken (waiter ids whose record can go), leases (id, ttl_ms
/// to extend by or 0), waits to report.
/// -> {"ok", {lease status...}, {waiter status...}, used, cap, ms to the
/// next expiry or -1} | {"epoch", new epoch}. A lease status is "ok" or a
/// loss; a waiter's is "q", "g<lease>", "r" or "gone".
const script& renew();
/// A waiter leaves. ARGV: epoch, sid, session_ms, waiter id, counter to
/// bump ("timeouts", "cancelled", "shutdowns" or ""), keep a grant (1/0).
/// -> {"left"} | {"granted", lease id} | {"returned"} | {"rejected"} | {"gone"}
const script& cancel();
/// ARGV: capacity. -> {"ok"}
const script& resize();
/// -> {"ok", live leases displaced}
const script& force_release();
/// -> {"ok", seats freed}
const script& reap();
/// ARGV: with holders (1/0). Writes nothing. -> {"ok", server now_us,
/// {field, value, ...} of the main hash, queued waiters, {id, weight,
/// granted_us, expires_us, pid, host, state, ...}}
const script& info();
/// ARGV: sid, session_ms, +1 or -1 wait_idle() callers. -> {"ok", used}
const script& idle();
/// Deletes the semaphore. ARGV: "1" to refuse while anything is held or
/// queued. -> {"ok", existed (1/0)} | {"busy"}
const script& destroy();

}  // namespace shmsem::detail::redis::scripts
