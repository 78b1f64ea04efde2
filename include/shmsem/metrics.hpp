// shmsem/metrics.hpp: Prometheus text exposition (format 0.0.4) of every
// semaphore on the host, read from the fleet-wide counters in the segments.
//
// No process has to be instrumented: one call by any process (semtop, the
// CLI, a node_exporter textfile job) describes the whole fleet. Each series
// carries a `key` label with the semaphore's key, escaped as the format wants
// (backslash, double quote and newline). The format wants UTF-8, so a byte of
// a key that is not UTF-8 becomes U+FFFD followed by its two hex digits
// ("k\xff" is "k\uFFFDFF"), and a U+FFFD in a key is followed by "U": every
// key has a label value of its own.
//
// Counters (the _total series and the histograms) count since the segment
// was created. Removing a key and creating it again (as `shmsem gc` does)
// restarts them at 0, and shmsem_created_timestamp_seconds then changes: a
// query can tell a reset that rate() would miss (the new counter already
// past the old value) by that series.
#pragma once

#include <shmsem/export.hpp>
#include <shmsem/stats.hpp>

#include <string>
#include <vector>

namespace shmsem {

/// The metrics of every semaphore on this host, in Prometheus text format
/// 0.0.4. Counters: shmsem_acquisitions_total, shmsem_reclaimed_total,
/// shmsem_recoveries_total, and the histograms shmsem_wait_duration_seconds
/// and shmsem_hold_duration_seconds. Gauges: shmsem_permits_active,
/// shmsem_permits_capacity, shmsem_waiters, shmsem_created_timestamp_seconds
/// (the segment's creation time, which marks a counter reset), plus
/// shmsem_scrape_skipped_segments (segments that were listed but could not
/// be read).
/// Reads each segment with Semaphore::inspect(), so it takes no segment
/// lock, never blocks on a stopped process and never writes to a segment,
/// whoever owns it; a segment that cannot be read is skipped and counted,
/// never an error.
/// Blocks only for the file system calls. Thread-safe.
SHMSEM_API std::string metrics_text();

/// The same exposition for snapshots the caller already holds (semtop does).
/// A snapshot whose key repeats an earlier one's is left out and counted as
/// skipped. Never throws except std::bad_alloc.
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
