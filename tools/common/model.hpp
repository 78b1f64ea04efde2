// common/model.hpp: what semtop and `shmsem ls/info` show, without any
// terminal code.
//
// The model turns samples (one Snapshot per semaphore, or the reason it
// could not be read) into rows: rates between two samples, reclaimed seats,
// oldest hold, sorting and filtering. sample_all() is the only function here
// that touches the library; everything else works on plain values, so the
// unit tests feed it hand-made samples. The view (view.cpp) and the batch
// printers (report.cpp) only read rows.
#pragma once

#include <shmsem/errors.hpp>
#include <shmsem/options.hpp>
#include <shmsem/semaphore.hpp>
#include <shmsem/stats.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace semtop {

using clock = std::chrono::steady_clock;

/// One semaphore as read at one moment: a snapshot, or why there is none.
struct sample {
  std::string key;
  std::optional<shmsem::Snapshot> snap;
  /// Empty when snap is set; otherwise a short reason: "corrupt: ...",
  /// "incompatible: ...", "no permission", "vanished", ...
  std::string error;
  /// The file's owner and mode (also when the contents cannot be read),
  /// and whether this user would open it (`trusted`).
  std::optional<shmsem::SegmentOwner> owner;
  /// The processes that use it, removed copies included (Semaphore::users).
  std::vector<shmsem::SegmentUser> users;
};

/// A segment file that exists but was never fully initialized (its creator
/// died first). It cannot be used until an open() with a capacity
/// initializes it.
class uninitialized_segment : public shmsem::SegmentError {
 public:
  using shmsem::SegmentError::SegmentError;
};

/// Semaphore::attach(), except that a file which exists but was never fully
/// initialized throws uninitialized_segment (errc::bad_segment) instead of
/// errc::not_found: there is something at the name, it is just unusable.
shmsem::Semaphore attach_existing(const std::string& key, const shmsem::Options& options = {});

/// Semaphore::inspect(), with the same distinction as attach_existing().
/// It never waits: a segment that another process is initializing (one
/// stopped while it holds the init lock, say) throws errc::busy at once, so
/// it cannot freeze semtop or `shmsem ls`.
shmsem::Snapshot inspect_existing(const std::string& key, const shmsem::Options& trust = {});

/// Reads every semaphore of the host through the public API: list(),
/// inspect() and all_users(). Reads without attaching and never writes to a
/// segment, whoever owns it; takes no segment lock and never waits for a
/// segment being initialized; never throws for one bad segment: that
/// segment becomes a sample with an error. `trust` gives
/// the owners this user trusts on purpose (Options::trusted_owners).
std::vector<sample> sample_all(const shmsem::Options& trust = {});

/// Reads one semaphore (same rules as sample_all()), and its users.
sample sample_one(const std::string& key, const shmsem::Options& trust = {});

/// How an administrator may act on `key` (drain, resize, reap, remove):
/// only as its owner or as root. Returns the options to attach() with (the
/// owner trusted when it is another user, since root acts on any user's
/// segment), and sets `whose` to "alice (uid 1001)" when the segment is
/// another user's, else "". Throws shmsem::SegmentError: not_found, or
/// permission_denied naming the owner when the caller is neither.
shmsem::Options admin_options(const std::string& key, const std::string& action, std::string& whose,
                              shmsem::Options trust = {});

/// "nobody (uid 65534)" or "uid 64001".
std::string owner_text(const shmsem::SegmentOwner& o);

/// "" if `user` is a user name of this host or a uid; otherwise why not
/// (a CLI11 validator for --trust-owner).
std::string check_user(const std::string& user);

/// Whether `key` names a file under /dev/shm (a shared-memory key), as
/// the library's Semaphore::capabilities_of() says; throws
/// std::invalid_argument for a URL that no backend of the library serves.
bool has_segment_file(const std::string& key);

/// Reads every semaphore on the Redis server at `url` (Semaphore::list of
/// it). A server that cannot be listed becomes one sample with an error.
std::vector<sample> sample_server(const std::string& url);

/// The name holders of this host carry: $SHMSEM_HOST if set, else the
/// host name. A holder elsewhere has no process here to name.
const std::string& local_host();

/// The short reason shown for a segment that cannot be read.
std::string describe_error(const std::exception& e);

/// One table row.
struct row {
  std::string key;
  std::optional<shmsem::Snapshot> snap;  ///< nullopt: unreadable, see error
  std::string error;
  /// Rates since the previous sample of the same key; nullopt on the first.
  std::optional<double> acquire_rate;
  std::optional<double> timeout_rate;
  /// Seats reclaimed (reaped, expired, force-released) since the previous
  /// sample; 0 on the first.
  std::uint64_t reclaimed_interval = 0;
  /// Age of the oldest lease, if any.
  std::optional<clock::duration> oldest_hold;
  std::optional<shmsem::SegmentOwner> owner;
  std::vector<shmsem::SegmentUser> users;

  bool ok() const { return snap.has_value(); }
  /// This user would refuse to open it (its owner is not trusted).
  bool untrusted() const { return owner && !owner->trusted; }
  /// Processes still using a removed or replaced copy of it: the bound is split.
  int split_processes() const;
  double utilization() const { return snap ? snap->utilization : 0.0; }
  int waiters() const { return snap ? snap->waiters : 0; }
};

enum class sort_key { key, util, waiters, acquire_rate };
/// "key", "util", "waiters", "acq/s".
const char* to_string(sort_key k);
/// The next sort order in the cycle key → util → waiters → acquire rate → key.
sort_key next(sort_key k);

/// Header totals over the visible (filtered) rows.
struct totals {
  int semaphores = 0;
  int unreadable = 0;
  long long used = 0;
  long long capacity = 0;
  long long waiters = 0;
  std::uint64_t reclaimed_interval = 0;
};

/// The rows of the last update, with rates against the update before.
class model {
 public:
  /// Replaces the rows with `samples` taken at `now`.
  void update(std::vector<sample> samples, clock::time_point now);

  /// Rows that match the filter, in the current sort order.
  std::vector<row> rows() const;
  totals sum() const;

  void set_sort(sort_key k) { sort_ = k; }
  sort_key sort() const { return sort_; }
  void cycle_sort() { sort_ = next(sort_); }
  /// Keeps only rows whose key contains `substring` (empty: all).
  void set_filter(std::string substring) { filter_ = std::move(substring); }
  const std::string& filter() const { return filter_; }

  /// The row with this key, if it is visible.
  std::optional<row> find(const std::string& key) const;
  clock::time_point updated_at() const { return now_; }

 private:
  struct previous {
    shmsem::Stats stats;
    clock::time_point at;
  };
  std::vector<row> rows_;
  std::map<std::string, previous> prev_;
  clock::time_point now_{};
  sort_key sort_ = sort_key::key;
  std::string filter_;
};

/// "12s", "3m04s", "2h05m", "-" for nullopt.
std::string format_age(std::optional<clock::duration> d);
/// "1.5", "120", "-" for nullopt.
std::string format_rate(std::optional<double> r);
/// The command name of a process from /proc/PID/comm, or "?" when gone.
std::string process_name(int pid);
/// process_name() of a holder on this host; "-" for one on another host.
std::string holder_command(const shmsem::Holder& h);

}  // namespace semtop
