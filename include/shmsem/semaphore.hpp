// shmsem/semaphore.hpp: Semaphore, a handle to one named, fleet-wide counting
// semaphore shared by every process on the host.
//
// A semaphore is named by a key. All processes that open the same key share
// one bound: at most capacity() seats are held at once across all of them.
// Seats are leases that record who holds them; a holder that dies (even by
// SIGKILL) never leaks a seat, and a lease with a TTL lapses unless renewed.
//
// Ordering (options.hpp, Fairness): waiters queue across processes. Under
// Fairness::barging, the default in shared memory, a running request (an
// acquire or a try_acquire) may pass the queue until its first in line has
// been first for kStarvationBound; that waiter is then served before
// anyone else, and the next one in line may be passed for the bound in
// turn. Under Fairness::fifo (and on Redis) waiters are served in strict
// FIFO order: a request that does not fit yet blocks every request behind
// it, and try_acquire() fails while anyone is waiting. Under either, a
// large request is never starved by a stream of small ones.
//
// A Semaphore is movable and safe to use from many threads at once. Many
// handles to one key in one process share one mapping.
//
// The segment lock. Uncontended acquires and releases take no lock. The
// rest (a thread's first acquire, contention, administration) take the
// segment's lock for microseconds. A process stopped (SIGSTOP, a debugger)
// while it holds that lock holds it until it continues; each call below
// says what it does then: acquire() waits within its wait_timeout (with
// rare exceptions, see acquire()),
// try_acquire() waits about 10 ms and reports no seat, the administrative
// calls wait for their optional lock_timeout, release() waits (the seats
// must go back). The lock-free reads never wait.
#pragma once

#include <shmsem/errors.hpp>
#include <shmsem/export.hpp>
#include <shmsem/options.hpp>
#include <shmsem/permit.hpp>
#include <shmsem/stats.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace shmsem {

namespace detail {
struct handle;
struct semaphore_access;
struct inspection;
/// Releases after with_permit's work ran: a lost seat is logged, not thrown.
SHMSEM_API void release_after_work(Permit& p) noexcept;
}  // namespace detail

/// What a semaphore's backend can do, so that a caller need not tell
/// backends apart by their keys (Semaphore::capabilities()).
struct Capabilities {
  /// The figures (capacity(), used(), ...), try_acquire() when it must not
  /// wait, and Permit::is_held() answer from memory, without I/O: safe on
  /// an event loop or with a language's global lock held. False for a
  /// backend that asks a server.
  bool reads_without_io = false;
  /// Fairness::barging can be chosen.
  bool barging = false;
  /// Permits carry fencing tokens (Permit::fencing_token()).
  bool fencing = false;
  /// A holder is a process whose death the kernel tells at once, and
  /// inheritable_liveness_fd() can share it with a process tree. False
  /// where a holder is a session that lapses after its timeout.
  bool process_liveness = false;
  /// The semaphore is a file under /dev/shm: segment_path(), owner(),
  /// users() and inspect() read it.
  bool segment_file = false;
};

class SHMSEM_API Semaphore {
 public:
  /// Opens the semaphore `key`, creating it with capacity `permits` if it
  /// does not exist. (The argument keeps the word of the key-based service
  /// API, `shmsem::acquire(key, permits)` in <shmsem/service.hpp>, the
  /// Redis semaphore services' word for the bound; everywhere else the
  /// bound is called the capacity.) Race-free: when many processes open a new key at once,
  /// exactly one initializes it and the others wait (up to
  /// Options::open_timeout). If the segment exists with another capacity,
  /// the existing capacity stands (a warning is logged): opening never
  /// changes the fleet's bound; use set_capacity() for that. A shared-memory
  /// key also reserves this process's holder record there (one of
  /// its 4,096; kept until the process lets go of the key) and
  /// waits (at most 10 ms) for the library's lifeline thread to start and
  /// take its lifeline, so that the first acquire only joins the queue;
  /// where that cannot be done, the first acquire does it.
  /// Throws std::invalid_argument for an empty key, a key with NUL, a key
  /// over 255 bytes, permits outside 1..kMaxCapacity, or a bad TTL; throws
  /// SegmentError (naming the path) when the file is not a valid segment,
  /// access is denied, or /dev/shm is full; and with errc::untrusted_owner,
  /// before reading a byte of it, when the file belongs to a user this
  /// process does not trust (see Options::trusted_owners).
  static Semaphore open(std::string_view key, int permits, const Options& options = {});

  /// Opens an existing semaphore without creating it. Throws SegmentError
  /// (errc::not_found) when there is none.
  static Semaphore attach(std::string_view key, const Options& options = {});

  /// Removes the semaphore's name, whoever uses it. Hazard: processes that
  /// have it open keep using their copy, and later opens create a new one,
  /// so from then on there are two semaphores under one key and twice the
  /// seats. Prefer remove_if_unused(). Returns false if there was none.
  /// Throws SegmentError on permission problems, invalid_argument on a bad key.
  static bool remove(std::string_view key);

  /// Removes the semaphore's segment only if no live process has it
  /// attached (holds, waits or merely has it open). Safe against a process
  /// that attaches concurrently: that process then creates a fresh segment.
  /// Returns true if removed; false if in use, absent, or busy.
  static bool remove_if_unused(std::string_view key);

  /// Removes the token files (/dev/shm/shmsem-tokens.*) of semaphores that
  /// are gone. A semaphore removed while in use keeps the files in which
  /// its users hold their liveness tokens, and the last of them to let go
  /// removes them; a user that exits without letting go (killed, or
  /// `_exit` in a forked child) leaves them behind. A file in which a token
  /// is still held is never removed, so this is safe at any time, beside
  /// any user. Returns the paths removed; with `dry_run`, removes nothing
  /// and returns what it would remove now. `shmsem gc` calls it.
  static std::vector<std::string> remove_orphaned_token_files(bool dry_run = false);

  /// Keys of the semaphores on this host (not file names), sorted. A
  /// segment whose key cannot be read (hashed name, no permission) is left out.
  static std::vector<std::string> list();

  /// URLs of the semaphores on the Redis server (or cluster) at `server`:
  /// redis://[user:password@]host[:port][?db=N] or redis+unix://PATH[?db=N]
  /// (a semaphore's URL names its server too). Each carries `server`'s
  /// login, so that it can be opened. Sorted. Scans every master; blocks
  /// up to Options{}.connect_timeout per call to the server. Throws
  /// std::invalid_argument for a URL that is not Redis's, SegmentError when
  /// the server cannot be reached.
  static std::vector<std::string> list(std::string_view server);

  /// Where the segment for `key` lives (a path under /dev/shm).
  /// Throws std::invalid_argument for an invalid key.
  static std::string segment_path(std::string_view key);

  /// Reads the semaphore `key` for a monitor, whoever owns it: opens the file
  /// read-only, copies the header and tables into private memory and builds
  /// the snapshot from the copy. It never writes to the segment, never maps
  /// it, takes no lock and does not attach (remove_if_unused() does not see
  /// it). It runs no trust check: owner.trusted says what open() would
  /// decide with `options`, and a reader should present the contents of an
  /// untrusted segment as claims of its owner. Throws SegmentError as
  /// attach() does (not_found, also for a file never fully initialized;
  /// permission_denied, bad_segment, ...), errc::busy at once while another
  /// process initializes it, and std::invalid_argument for a bad key. Does
  /// not block. A Redis key is read through a handle of its own, as
  /// attach(key).snapshot() (bounded by Options::connect_timeout).
  static Snapshot inspect(std::string_view key, const Options& options = {});

  /// The owner and mode of the segment for `key`, read with lstat, so it
  /// works even when the file cannot be opened. Throws SegmentError
  /// (errc::not_found) when there is none, std::invalid_argument for a bad
  /// key or a Redis key (which has no file, and whose server decides who
  /// may use it).
  static SegmentOwner owner(std::string_view key, const Options& options = {});

  /// The processes that have a segment of `key` open: the one its name leads
  /// to, or a copy removed or replaced while they used it. Found through
  /// /proc (descriptors, and the OFD locks each holds) and the segment's
  /// holder records; sorted by pid. Never writes. Costs a pass over /proc:
  /// for tools, not for a hot path. Empty for a Redis key: its users are on
  /// other hosts too. Throws std::invalid_argument for a bad key.
  static std::vector<SegmentUser> users(std::string_view key);
  /// users() of every semaphore of the host, in one pass over /proc.
  static std::vector<SegmentUser> all_users();

  Semaphore(Semaphore&&) noexcept;
  Semaphore& operator=(Semaphore&&) noexcept;
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;
  ~Semaphore();

  /// Takes n seats, all or nothing, blocking in the queue until they are
  /// free (under Fairness::barging, it may first pass the queue). Ends with AcquisitionError:
  /// Reason::timeout when opts.wait_timeout runs out (the wait for the segment lock counts; once
  /// queued, the call leaves the queue without the lock, except in the rare
  /// cases docs/guarantees.md lists under "a process stopped while it holds
  /// the segment lock"),
  /// cancelled when opts.stop is requested, shutdown after shutdown(),
  /// exceeds_capacity when n > capacity() now or after a shrink while
  /// waiting. Throws SegmentError when the segment cannot be used (for
  /// example a full /dev/shm when the lease table must grow), and
  /// std::invalid_argument for n < 1 or a bad duration.
  /// While it waits, a dead holder's seats are reclaimed when the kernel
  /// reports the death (Snapshot::death_wakeup says how, and when it falls
  /// back to a 20 ms tick), and expired leases at their expiry. A grant whose TTL ran out before
  /// this thread ran to take it is not returned: the call queues again, first in line. The permit
  /// it returns was held when it was taken. Uncontended, it makes no system
  /// call and no allocation. A process's first acquire on a semaphore that
  /// gets its seats at once then waits (at most 10 ms, within
  /// opts.wait_timeout) for the library's thread to arm its lifeline, so
  /// that its death is heard at once from then on.
  Permit acquire(int n = 1, const AcquireOptions& opts = {});

  /// One attempt, no waiting for seats. Reclaims dead holders' seats and
  /// expired leases before it reports the semaphore full. Returns nullopt
  /// when the seats are not free now, when others are queued (under
  /// Fairness::barging: only once the first in line starved), when n >
  /// capacity(), after shutdown, or when the segment lock stayed busy for
  /// about 10 ms (a process stopped while holding it; logged once per
  /// process). Throws std::invalid_argument for n < 1, SegmentError when the
  /// segment cannot be used.
  std::optional<Permit> try_acquire(int n = 1, const AcquireOptions& opts = {});

  /// Acquires n seats, runs fn (with the Permit& if fn accepts one), and
  /// always releases, even when fn throws. A seat lost while fn ran is
  /// logged as a warning, not thrown: the work already ran. Returns what fn
  /// returns; fn's exceptions propagate unchanged.
  template <class F>
  decltype(auto) with_permit(F&& fn, int n = 1, const AcquireOptions& opts = {}) {
    Permit permit = acquire(n, opts);
    struct releaser {
      Permit& p;
      ~releaser() { detail::release_after_work(p); }
    } guard{permit};
    if constexpr (std::is_invocable_v<F, Permit&>)
      return std::invoke(std::forward<F>(fn), permit);
    else
      return std::invoke(std::forward<F>(fn));
  }

  /// Lock-free reads of the shared counters. They work while another
  /// process is stopped inside the segment lock.
  int capacity() const noexcept;
  int used() const noexcept;
  int available() const noexcept;       ///< capacity - used, never below 0
  int waiters() const noexcept;         ///< callers blocked in acquire, fleet-wide
  bool empty() const noexcept;          ///< used() == 0
  bool full() const noexcept;           ///< used() >= capacity()
  double utilization() const noexcept;  ///< used / capacity, may exceed 1 after a shrink
  /// Time-based EWMA of utilization() with half-life kEwmaHalfLife; decays
  /// toward the current utilization while nothing happens.
  double utilization_smoothed() const noexcept;
  /// The admission policy every process of the fleet follows: the one the
  /// creator stored in the segment (Options::fairness), whatever this
  /// process asked for. A Redis key is always Fairness::fifo.
  Fairness fairness() const noexcept;
  /// What this semaphore's backend can do. `fencing` is this semaphore's:
  /// a shared-memory segment has tokens only if created with
  /// Options::fencing.
  Capabilities capabilities() const noexcept;
  /// What the backend that serves `key` can do, before opening it
  /// (`fencing` is true if any of its semaphores may have tokens). Throws
  /// std::invalid_argument, naming the scheme, for a URL that this build
  /// has no backend for.
  static Capabilities capabilities_of(std::string_view key);
  /// True if `text` is the URL of a server rather than of one semaphore on
  /// it (what list(server) takes): "redis://host:6379" but not
  /// "redis://host:6379/jobs". False for anything else, malformed URLs
  /// included. Never throws.
  static bool names_server(std::string_view text) noexcept;
  /// `key` as messages and logs show it: a URL without its login (user
  /// and password, shown as "..."); any other key as it is.
  static std::string shown_key(std::string_view key);

  /// The current leases, read without a lock. Their state tells dead and
  /// expired holders (not yet reaped) from live ones.
  std::vector<Holder> holders() const;
  /// Fleet-wide counters kept in the segment, read without a lock.
  Stats stats() const;
  /// Everything above in one call, read without a lock.
  Snapshot snapshot() const;

  /// Reclaims dead holders' and expired leases' seats now and wakes waiters.
  /// Returns the seats freed. Waits for the segment lock without limit, or
  /// at most `lock_timeout`, then throws SegmentError (errc::lock_timeout,
  /// naming the key). On Redis there is no segment lock: `lock_timeout` is
  /// unused there, and Options::connect_timeout bounds the call.
  int reap(std::optional<std::chrono::milliseconds> lock_timeout = std::nullopt);

  /// Sets the fleet-wide capacity to `permits` (1..kMaxCapacity, else
  /// std::invalid_argument). Growing wakes waiters. Shrinking takes no seat
  /// away: new seats are granted only once used < permits, and waiters whose
  /// n no longer fits end with Reason::exceeds_capacity. Throws SegmentError
  /// (errc::no_space) if /dev/shm cannot hold the larger lease table, and
  /// changes nothing then. Waits for the segment lock as reap() does.
  void set_capacity(int permits,
                    std::optional<std::chrono::milliseconds> lock_timeout = std::nullopt);

  /// Frees every seat and wakes waiters. Returns the number of leases whose
  /// holder was alive and unexpired: their release(), is_held() and
  /// extend() then report the loss. Dead and expired leases are freed too
  /// but not counted. Waits for the segment lock as reap() does.
  int force_release_all(std::optional<std::chrono::milliseconds> lock_timeout = std::nullopt);

  /// Blocks until used() == 0 (true) or the timeout passes (false). Reaps
  /// dead holders and expired leases while it waits; does not block new acquires.
  bool wait_idle(std::chrono::milliseconds timeout);

  /// The application-shutdown contract for this handle: its permits stop
  /// auto-renewing (so they lapse within their TTL), its blocked acquires
  /// end with Reason::shutdown, a seat won during shutdown is given back,
  /// and later acquires fail with Reason::shutdown. Held permits are NOT
  /// released: they guard work that may still be running.
  void shutdown();

  /// The key this handle was opened with.
  std::string_view key() const noexcept;

  /// False once the key's name no longer leads to the segment this handle
  /// uses (removed with remove() or `shmsem rm --force`, or replaced): this
  /// process and the processes that open the key from now on count separate
  /// bounds. One lstat; blocked acquires and wait_idle() check it on their
  /// own about once a second and log a warning, once per segment.
  bool name_still_points_here() const;

  /// A new descriptor of this process's liveness token (of the segment's
  /// token file that holds it, /dev/shm/shmsem-tokens.*), for
  /// a child to inherit (it is close-on-exec: clear FD_CLOEXEC in the child,
  /// after fork and before exec). It shares the open file description that
  /// holds the token, so while any process keeps a copy of it open, this
  /// process counts as alive to the fleet even after it died: its seats are
  /// not reaped, and the bound then covers the whole process tree, as with
  /// flock(1). They are reaped once this process is gone and every copy is
  /// closed. A process that closes every descriptor (a daemon) drops it.
  /// Precondition: this process has acquired through this key (its holder
  /// record is claimed at the first acquire), and the key is not a Redis
  /// key (whose holder is the process's session); otherwise throws
  /// std::logic_error. The caller owns and closes the descriptor. Throws
  /// std::system_error if dup fails. Descriptors made before fork() are
  /// inherited as they are (the library gives a forked child descriptions
  /// of its own only for the token file descriptors it keeps itself).
  int inheritable_liveness_fd() const;

 private:
  friend struct detail::semaphore_access;
  explicit Semaphore(std::unique_ptr<detail::handle> h) noexcept;
  friend struct detail::inspection;
  std::unique_ptr<detail::handle> h_;
};

/// shutdown() for every handle of this process, and for handles opened later.
SHMSEM_API void shutdown_all();

}  // namespace shmsem
