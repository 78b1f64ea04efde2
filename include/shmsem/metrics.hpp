// shmsem/metrics.hpp: Prometheus text exposition (format 0.0.4) of every
// semaphore on the host, read from the fleet-wide counters in the segments.
//
// No process has to be instrumented: one call by any process (semtop, the
// CLI, a node_exporter textfile job) describes the whole fleet. Each series
// carries a `key` label with the semaphore's key, escaped as the format wants
// (backslash, double quote and newline).
#pragma once

#include <shmsem/export.hpp>
#include <shmsem/stats.hpp>

#include <string>
#include <vector>

namespace shmsem {

/// The metrics of every semaphore on this host, in Prometheus text format
/// 0.0.4: shmsem_acquisitions_total, shmsem_wait_duration_seconds,
/// shmsem_hold_duration_seconds, shmsem_permits_active,
/// shmsem_permits_capacity, shmsem_waiters, shmsem_reclaimed_total,
/// shmsem_recoveries_total, plus shmsem_scrape_skipped_segments (segments
/// that were listed but could not be read).
/// Reads each segment with Semaphore::attach() and snapshot(), so it takes
/// no segment lock and never blocks on a stopped process; a segment that
/// cannot be attached or read is skipped and counted, never an error.
/// Blocks only for the file system calls. Thread-safe.
SHMSEM_API std::string metrics_text();

/// The same exposition for snapshots the caller already holds (semtop does).
/// Snapshots whose label value would repeat an earlier one (keys that differ
/// only in bytes that are not valid UTF-8) are left out. Never throws except
/// std::bad_alloc.
SHMSEM_API std::string metrics_text(const std::vector<Snapshot>& snapshots,
                                    int skipped_segments = 0);

/// Writes metrics_text() to `path` for node_exporter's textfile collector:
/// the text goes to a temporary file in the same directory
/// (`<path>.tmp.<pid>.<n>`, not ending in .prom), is flushed to disk
/// (fsync), made mode 0644 and renamed over `path`, and then the directory
/// is flushed. A scrape sees the old file or the new one, never a partial
/// one, and so does a reader after a crash. A temporary file left at that
/// name by a dead process that had the same pid is replaced.
/// Throws std::system_error (system_category, naming the path) when the
/// file cannot be written, flushed or renamed; the temporary file is
/// removed then.
/// Blocks for the file system calls (fsync included). Thread-safe.
SHMSEM_API void write_metrics_textfile(const std::string& path);

}  // namespace shmsem
