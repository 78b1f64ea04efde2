// leases.hpp: the scans of the whole lease table that the public layer
// needs (leases.cpp): the stats, the holders, and force_release_all().
#pragma once

#include <shmsem/stats.hpp>

#include <cstdint>
#include <vector>

#include "shm/segment.hpp"

namespace shmsem::detail {

/// The counters of `a`, the fast path's per-thread ones included. Lock-free.
Stats read_stats(const attachment& a);
/// Every held lease of `a`, with its holder's state. Lock-free: a lease
/// that changes while it is read is left out.
std::vector<Holder> list_holders(const attachment& a);
/// [locked] Ends every held lease of `a`: an expired one as expired, a dead
/// holder's as reaped, the rest as force-released. Returns how many live
/// leases it displaced (the last kind).
int force_release_all(attachment& a, std::int64_t now_ns, wake_list& wakes);

}  // namespace shmsem::detail
