/* shmsem/shmsem.h: the C ABI of shmsem, for C programs and for any language
 * that loads libshmsem.so.0 through an FFI (Python's ctypes, PHP's FFI,
 * Ruby's fiddle, Node's ffi, Rust).
 *
 * A C program and a C++ or Python process that open the same key share the
 * same seats: this is a thin layer over the C++ API (shmsem::Semaphore).
 * A key that is a Redis URL (redis://host[:port]/KEY or
 * redis+unix:///PATH?key=KEY, see docs/redis.md) names a semaphore kept in
 * Redis, shared by every host that reaches the server; every function below
 * works on it, at the cost of a round trip to Redis where it says
 * "lock-free" or "no lock".
 *
 * Conventions
 *   - Opaque handles: shmsem_sem (an open semaphore), shmsem_permit (a held
 *     lease), shmsem_cancel_token.
 *   - Every call that can fail returns an int status: SHMSEM_OK (0) or a
 *     negative SHMSEM_E* code. shmsem_strerror() names a code;
 *     shmsem_last_error() gives the full message of the calling thread's
 *     last failure (it names the key and the problem). Calls that return a
 *     count or a figure return it when >= 0 and a negative code otherwise.
 *   - No exception crosses this interface, and no C++ type.
 *   - Option structs start with their own size. Set it with the _INIT
 *     macro; a library built later can then add fields at the end without
 *     breaking a caller compiled against this header, and a caller compiled
 *     against a later header gets SHMSEM_EINVAL from an older library only
 *     if it sets a field that library does not know (non-zero bytes past
 *     the library's struct), the way Linux's clone3() and openat2() do.
 *   - Thread safety: a shmsem_sem may be used from many threads at once. A
 *     shmsem_permit is used by one thread at a time (any thread).
 *   - If the process dies (even by SIGKILL) while it holds seats, the fleet
 *     reclaims them: a blocked waiter hears of the death from the kernel and
 *     gets the seat about half a millisecond after the kill at the median,
 *     a few milliseconds on a loaded host (docs/performance.md, case 8).
 *     Before Linux 5.16 or past 127 attached processes: within a 20 ms
 *     reclaim tick. On Redis: within the session timeout and a third of it.
 *   - Handles are freed once, as memory is with free(3): after
 *     shmsem_release(p), shmsem_close(s) or shmsem_cancel_token_free(t)
 *     the handle must not be passed to any function again. A second free
 *     or a use after it is a bug. The library catches it in most cases (a
 *     freed handle is marked, and its memory is not reused until 64 more
 *     handles have been freed on the same thread): the call then does
 *     nothing and returns SHMSEM_EINVAL, "p was released already". Past
 *     that, as with free(3), the behaviour is undefined.
 *
 * Durations are milliseconds in int64_t. Times (shmsem_holder) are
 * nanoseconds on CLOCK_MONOTONIC.
 */
#ifndef SHMSEM_SHMSEM_H
#define SHMSEM_SHMSEM_H

#include <stddef.h>
#include <stdint.h>

#ifndef SHMSEM_API
#if defined(SHMSEM_BUILDING_LIBRARY)
#define SHMSEM_API __attribute__((visibility("default")))
#else
#define SHMSEM_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- codes */

#define SHMSEM_OK 0
#define SHMSEM_ETIMEDOUT (-1)    /* the wait budget ran out */
#define SHMSEM_EUNAVAILABLE (-2) /* try_acquire: the seats are not free now */
#define SHMSEM_ENOTHELD (-3)     /* release: the seats were lost first (TTL, reaped, forced) */
#define SHMSEM_EINVAL                                                         \
  (-4) /* a bad argument: key, n, duration, NULL, a freed handle, option size \
        */
#define SHMSEM_ESEGMENT                                                                           \
  (-5) /* the segment cannot be used (access, corrupt, /dev/shm full), or Redis cannot be reached \
          or holds other data */
#define SHMSEM_ECANCELED (-6)    /* the acquire's cancel token was cancelled */
#define SHMSEM_ESHUTDOWN (-7)    /* shmsem_shutdown() or shmsem_shutdown_all() */
#define SHMSEM_EEXCEEDS (-8)     /* n is larger than the capacity */
#define SHMSEM_EEXTEND (-9)      /* extend: the seats were lost first */
#define SHMSEM_EUNKNOWN (-10)    /* anything else; see shmsem_last_error() */
#define SHMSEM_ENOMEM (-11)      /* out of memory */
#define SHMSEM_ENOENT (-12)      /* SHMSEM_OPEN_NOCREATE and no such semaphore */
#define SHMSEM_EUNTRUSTED (-13)  /* the segment's owner is a user this process does not trust */
#define SHMSEM_EINPROGRESS (-14) /* shmsem_acquire_async waits; its callback ends it */

/* The name of a code ("SHMSEM_ETIMEDOUT: timed out"), or "unknown code".
 * Never NULL; the string is static. */
SHMSEM_API const char* shmsem_strerror(int code);

/* The full message of the calling thread's last failing call ("" if none
 * failed yet). Valid until the thread's next failing call. */
SHMSEM_API const char* shmsem_last_error(void);

/* The version of the loaded library, "X.Y.Z". */
SHMSEM_API const char* shmsem_version(void);

/* ---------------------------------------------------------------- handles */

typedef struct shmsem_sem shmsem_sem;
typedef struct shmsem_permit shmsem_permit;
typedef struct shmsem_cancel_token shmsem_cancel_token;

/* ---------------------------------------------------------------- open */

/* Opens the semaphore `key`, creating it with `permits` seats (1..1000000)
 * if it does not exist. Many processes may open a new key at once: exactly
 * one creates it. An existing semaphore keeps its capacity (a warning is
 * logged if `permits` differs). Keys are 1..255 bytes without NUL, or a
 * Redis URL (its KEY 1..255 bytes).
 * On success *out is a new handle (close it with shmsem_close); on failure
 * *out is NULL. Errors: SHMSEM_EINVAL (key, permits), SHMSEM_ESEGMENT. */
SHMSEM_API int shmsem_open(const char* key, uint32_t permits, shmsem_sem** out);

/* Flags of shmsem_open_options. */
#define SHMSEM_OPEN_NOCREATE 1u /* open an existing semaphore only; permits is ignored */
#define SHMSEM_OPEN_FENCING 2u  /* shared memory, at creation: grants carry fencing tokens */
/* Shared memory, at creation: the fairness policy (shmsem/options.hpp).
 * Without either flag, the default: Fairness::barging, where a running
 * request may take a free seat ahead of the sleeping ones until the first
 * in line has been first for 1 ms. SHMSEM_OPEN_FIFO asks for strict FIFO
 * order. Both at once is SHMSEM_EINVAL; so is SHMSEM_OPEN_BARGING on a
 * Redis key, which is always FIFO. A library older than a flag refuses it. */
#define SHMSEM_OPEN_BARGING 4u
#define SHMSEM_OPEN_FIFO 8u

typedef struct {
  uint32_t size;           /* sizeof(shmsem_open_options) */
  uint32_t flags;          /* SHMSEM_OPEN_* */
  uint32_t mode;           /* of a segment this call creates, whatever the umask; 0: 0600 */
  uint32_t reserved;       /* 0 */
  int64_t default_ttl_ms;  /* TTL of this handle's permits when an acquire does not say; 0: none */
  int default_auto_renew;  /* non-zero: permits with a TTL renew in the background by default */
  int64_t open_timeout_ms; /* wait for another process that is creating it; < 0: 5000 */
  /* Fields after the struct's first version (40 bytes): a library built
   * before them refuses a non-zero value with SHMSEM_EINVAL. */
  /* Users whose segments to accept on purpose: a NULL-terminated array of
   * user names ("postgres") or decimal uids ("1001"), read during the call
   * only; NULL: none. */
  const char* const* trusted_owners;
  /* Redis keys only: */
  int64_t session_timeout_ms; /* how long this process's leases outlive its last contact
                                 with Redis; 0: 3000 */
  int64_t connect_timeout_ms; /* bound on connecting and on each command; 0: 1000 */
  /* Later fields go after these. */
} shmsem_open_options;
/* clang-format off */
#define SHMSEM_OPEN_OPTIONS_INIT {sizeof(shmsem_open_options), 0, 0600, 0, 0, 0, -1, NULL, 0, 0}
/* clang-format on */

/* shmsem_open with options (NULL: the defaults above). With
 * SHMSEM_OPEN_NOCREATE, a missing semaphore is SHMSEM_ENOENT.
 *
 * /dev/shm is writable by every user, so another user could create the
 * file of a key first, with a capacity of their choosing. A segment is
 * accepted if its owner is this process's effective uid or root; or if
 * this process is not root and the file is not writable by others (by its
 * mode or by a POSIX ACL entry naming another user or group); or if its
 * owner is in o->trusted_owners. Otherwise SHMSEM_EUNTRUSTED, and
 * shmsem_last_error() names the owner, the mode and the opt-in. */
SHMSEM_API int shmsem_open_ex(const char* key, uint32_t permits, const shmsem_open_options* o,
                              shmsem_sem** out);

/* Closes a handle and frees it: do not use `s` again (see "Handles are
 * freed once" above). Permits it made stay valid and keep their seats
 * until released. Its waiting shmsem_acquire_async requests end with
 * SHMSEM_ECANCELED, and it returns once their callbacks have returned.
 * NULL is a no-op. */
SHMSEM_API void shmsem_close(shmsem_sem* s);

/* Removes the semaphore's name: processes that have it open keep their
 * copy, later opens create a new one. Returns 1 if removed, 0 if there was
 * none, or a negative code (SHMSEM_EINVAL, SHMSEM_ESEGMENT). */
SHMSEM_API int shmsem_remove(const char* key);

/* Removes it only if no live process has it open. 1 removed, 0 in use or
 * absent, or a negative code. */
SHMSEM_API int shmsem_remove_if_unused(const char* key);

/* The key `s` was opened with (valid while `s` is open), or NULL for NULL. */
SHMSEM_API const char* shmsem_key(const shmsem_sem* s);

/* ---------------------------------------------------------------- acquire */

/* ttl_ms: take the handle's default TTL. auto_renew: take the handle's default. */
#define SHMSEM_TTL_DEFAULT (-1)
#define SHMSEM_RENEW_DEFAULT (-1)

typedef struct {
  uint32_t size;           /* sizeof(shmsem_acquire_options) */
  uint32_t n;              /* seats, >= 1 */
  int64_t wait_timeout_ms; /* < 0: wait for ever; 0: do not wait */
  int64_t ttl_ms;          /* 0: no TTL; SHMSEM_TTL_DEFAULT: the handle's */
  int auto_renew;          /* non-zero: renew at a third of the TTL; SHMSEM_RENEW_DEFAULT */
} shmsem_acquire_options;
/* clang-format off */
#define SHMSEM_ACQUIRE_OPTIONS_INIT {sizeof(shmsem_acquire_options), 1, -1, 0, 0}
/* clang-format on */

/* Takes o->n seats, all or nothing, waiting in the queue across processes
 * for up to o->wait_timeout_ms. NULL options: one seat, wait for ever, the
 * handle's default TTL and renewal. Blocks. Uncontended it makes no system
 * call. While it waits, dead holders' seats are reclaimed.
 * On success *out is a new permit (end it with shmsem_release); on failure
 * NULL. Errors: SHMSEM_ETIMEDOUT, SHMSEM_ESHUTDOWN, SHMSEM_EEXCEEDS (n >
 * capacity, also after a shrink while waiting), SHMSEM_EINVAL,
 * SHMSEM_ESEGMENT. */
SHMSEM_API int shmsem_acquire(shmsem_sem* s, const shmsem_acquire_options* o, shmsem_permit** out);

/* shmsem_acquire that another thread can end with shmsem_cancel(cancel):
 * then SHMSEM_ECANCELED, and a seat granted as the cancel lands goes back.
 * cancel NULL: shmsem_acquire. */
SHMSEM_API int shmsem_acquire_cancellable(shmsem_sem* s, const shmsem_acquire_options* o,
                                          shmsem_cancel_token* cancel, shmsem_permit** out);

/* How an asynchronous acquire ended: status SHMSEM_OK with a new permit
 * (end it with shmsem_release), or a failure code with permit NULL and the
 * message in shmsem_last_error() on the calling thread. Called exactly once,
 * on a thread of the library, perhaps before shmsem_acquire_async has
 * returned. It may release the permit or free the cancel token; it must not
 * block for long (other requests' callbacks do not wait for it, but
 * shmsem_close does). */
typedef void (*shmsem_acquire_done_fn)(int status, shmsem_permit* permit, void* ctx);

/* shmsem_acquire for callers that must never block: an event loop (Node,
 * asyncio) or a thread with other work. Same options; cancel may be NULL.
 *  - SHMSEM_OK: the seats were free and are taken now, on this thread;
 *    *out is the permit and `done` is never called. On a
 *    Redis URL this never happens unless o->wait_timeout_ms is 0: the round
 *    trip is made on the library's thread, so the caller does not wait on
 *    the network.
 *  - SHMSEM_EINPROGRESS: the request waits in the queue, on a thread the
 *    library starts for it (never a thread of the caller's pool), and
 *    done(status, permit, ctx) says how it ends: granted, SHMSEM_ETIMEDOUT
 *    after o->wait_timeout_ms, SHMSEM_ECANCELED after shmsem_cancel(cancel)
 *    (a seat granted as the cancel lands goes back), SHMSEM_ESHUTDOWN,
 *    SHMSEM_EEXCEEDS, SHMSEM_ESEGMENT.
 *  - any other code: it failed at once (bad arguments, n > capacity with
 *    o->wait_timeout_ms 0, cancelled before the call...), `done` is never
 *    called.
 * shmsem_close(s) cancels s's waiting requests and returns once their
 * callbacks have. A forked child has no part in its parent's requests.
 * The cancel token must stay alive until the callback has run. */
SHMSEM_API int shmsem_acquire_async(shmsem_sem* s, const shmsem_acquire_options* o,
                                    shmsem_cancel_token* cancel, shmsem_acquire_done_fn done,
                                    void* ctx, shmsem_permit** out);

/* One attempt without waiting, with the handle's default TTL. It does not
 * pass waiters already queued. SHMSEM_EUNAVAILABLE when the seats are not
 * free now, when others wait, when n > capacity or after shutdown. */
SHMSEM_API int shmsem_try_acquire(shmsem_sem* s, uint32_t n, shmsem_permit** out);

/* A token that cancels the acquires that carry it, from any
 * thread: the FFI host's signal-handling thread, an event loop. It is not
 * async-signal-safe: do not call shmsem_cancel inside a signal handler. */
SHMSEM_API int shmsem_cancel_token_new(shmsem_cancel_token** out);
/* Frees the token: do not use `t` again. NULL is a no-op. Not while an
 * acquire still uses the token. */
SHMSEM_API void shmsem_cancel_token_free(shmsem_cancel_token* t);
/* Ends the acquires that wait with this token (SHMSEM_ECANCELED) and makes
 * later ones fail at once, until shmsem_cancel_token_reset. A seat granted
 * while the cancel lands goes back. Idempotent. */
SHMSEM_API int shmsem_cancel(shmsem_cancel_token* t);
/* Makes the token usable again. Not while an acquire uses it. */
SHMSEM_API int shmsem_cancel_token_reset(shmsem_cancel_token* t);
/* 1 if cancelled, 0 if not, or a negative code. */
SHMSEM_API int shmsem_cancel_token_cancelled(const shmsem_cancel_token* t);

/* ---------------------------------------------------------------- permits */

/* Frees the seats and wakes waiters, and always frees `p`, whatever it
 * returns: do not use `p` again, not even for a second release (see
 * "Handles are freed once" above; a second release that is caught returns
 * SHMSEM_EINVAL and frees nothing). SHMSEM_ENOTHELD if the seats were lost
 * first (TTL ran out, reaped, force-released, or the permit was inherited
 * across fork: it belongs to the parent); the message says why and since
 * when. */
SHMSEM_API int shmsem_release(shmsem_permit* p);

/* Sets the lease's expiry to now + ttl_ms (1..1000000000). A permit without
 * TTL gains one. SHMSEM_EEXTEND if the seats were lost first. */
SHMSEM_API int shmsem_extend(shmsem_permit* p, int64_t ttl_ms);

/* 1 if the seats are still held, 0 if lost, or a negative code. No lock. */
SHMSEM_API int shmsem_is_held(const shmsem_permit* p);

/* The permit's id (unique within its semaphore, never 0), or 0 for NULL. */
SHMSEM_API uint64_t shmsem_permit_id(const shmsem_permit* p);
/* Seats the permit holds, or a negative code. */
SHMSEM_API int shmsem_permit_weight(const shmsem_permit* p);
/* The grant's fencing token: it strictly increases with every grant of the
 * semaphore, so a resource that remembers the highest token it accepted can
 * refuse a holder whose seats were lost. Every grant on Redis has one; on
 * shared memory only a semaphore created with SHMSEM_OPEN_FENCING does, and
 * it is 0 otherwise (and for NULL). With capacity > 1 tokens order grants,
 * not seats: compare them per unit of work, not across the semaphore. */
SHMSEM_API uint64_t shmsem_permit_fencing_token(const shmsem_permit* p);

/* ---------------------------------------------------------------- figures */

/* Lock-free reads of the fleet-wide counters: a figure >= 0, or a
 * negative code (SHMSEM_EINVAL for NULL). */
SHMSEM_API int64_t shmsem_capacity(const shmsem_sem* s);
SHMSEM_API int64_t shmsem_used(const shmsem_sem* s);
SHMSEM_API int64_t shmsem_available(const shmsem_sem* s);
SHMSEM_API int64_t shmsem_waiters(const shmsem_sem* s);
/* 1 if the semaphore admits under Fairness::barging (SHMSEM_OPEN_BARGING),
 * 0 under fifo: the policy its creator stored, whatever this caller asked
 * for. A Redis key is always fifo. SHMSEM_EINVAL for NULL. */
SHMSEM_API int shmsem_is_barging(const shmsem_sem* s);

/* What the semaphore's backend can do (Semaphore::capabilities() in
 * <shmsem/semaphore.hpp>), as SHMSEM_CAP_* bits, so that a binding need not
 * tell backends apart by their keys. SHMSEM_EINVAL for NULL. */
#define SHMSEM_CAP_READS_WITHOUT_IO 1 /* figures, a try and is_held from memory */
#define SHMSEM_CAP_BARGING 2          /* SHMSEM_OPEN_BARGING can be chosen */
#define SHMSEM_CAP_FENCING 4          /* permits carry fencing tokens */
#define SHMSEM_CAP_PROCESS_LIVENESS 8 /* a holder is a process, its death seen at once */
#define SHMSEM_CAP_SEGMENT_FILE 16    /* the semaphore is a file under /dev/shm */
SHMSEM_API int shmsem_capabilities(const shmsem_sem* s);

/* Counters kept in the segment since it was created (leases, not seats,
 * except reclaimed_seats). */
typedef struct {
  uint32_t size; /* sizeof(shmsem_stats), set by the caller */
  uint32_t reserved;
  uint64_t acquired;
  uint64_t released;
  uint64_t timeouts;
  uint64_t cancelled;
  uint64_t shutdowns;
  uint64_t rejected;
  uint64_t try_failures;
  uint64_t reaped;
  uint64_t expired;
  uint64_t force_released;
  uint64_t reclaimed_seats;
  uint64_t recoveries;
} shmsem_stats;
/* clang-format off */
#define SHMSEM_STATS_INIT {sizeof(shmsem_stats), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
/* clang-format on */

/* Fills out->size bytes of *out. Lock-free. */
SHMSEM_API int shmsem_get_stats(const shmsem_sem* s, shmsem_stats* out);

#define SHMSEM_HOLDER_ALIVE 0
#define SHMSEM_HOLDER_DEAD 1    /* the process is gone (on Redis: its session lapsed) */
#define SHMSEM_HOLDER_EXPIRED 2 /* the TTL ran out; the seats will be reclaimed */

/* One lease in the segment. */
typedef struct {
  int32_t pid;               /* as this PID namespace sees it; 0 if unknown there */
  int32_t weight;            /* seats */
  uint64_t permit_id;        /* shmsem_permit_id() of the holder's permit */
  int64_t acquired_ns;       /* CLOCK_MONOTONIC */
  int64_t expires_ns;        /* CLOCK_MONOTONIC; 0: no TTL */
  int32_t state;             /* SHMSEM_HOLDER_* */
  int32_t foreign_namespace; /* 1: the holder lives in another PID namespace */
  char host[256];            /* on Redis, the holder's host name, NUL-terminated (truncated);
                                "" on shared memory, whose holders are all on this host */
} shmsem_holder;

/* The current leases, read without a lock. Writes up to `max` of them to
 * `out`, each `elem_size` bytes apart (pass sizeof(shmsem_holder)), and
 * returns how many there are (which may exceed max), or a negative code. */
SHMSEM_API int shmsem_holders(const shmsem_sem* s, shmsem_holder* out, size_t max,
                              size_t elem_size);

/* ---------------------------------------------------------------- admin */

/* Sets the fleet-wide capacity (1..1000000). Growing wakes waiters;
 * shrinking takes no seat away (new seats wait until used < permits) and
 * ends waiters whose n no longer fits with SHMSEM_EEXCEEDS. */
SHMSEM_API int shmsem_set_capacity(shmsem_sem* s, uint32_t permits);

/* Frees every seat. Returns the number of live, unexpired leases displaced
 * (their release then reports SHMSEM_ENOTHELD), or a negative code. */
SHMSEM_API int shmsem_force_release_all(shmsem_sem* s);

/* Reclaims dead holders' and expired leases' seats now. Returns the seats
 * reclaimed, or a negative code. */
SHMSEM_API int shmsem_reap(shmsem_sem* s);

/* Blocks until no seat is used (1) or timeout_ms passes (0); reaps dead
 * holders meanwhile. timeout_ms < 0 is 0. */
SHMSEM_API int shmsem_wait_idle(shmsem_sem* s, int64_t timeout_ms);

/* Application shutdown for this handle: its blocked acquires end with
 * SHMSEM_ESHUTDOWN, later ones fail, its permits stop renewing. Held
 * permits are not released. */
SHMSEM_API int shmsem_shutdown(shmsem_sem* s);
/* The same for every handle of the process, and for handles opened later. */
SHMSEM_API void shmsem_shutdown_all(void);

/* ---------------------------------------------------------------- logging */

#define SHMSEM_LOG_DEBUG 1
#define SHMSEM_LOG_INFO 2
#define SHMSEM_LOG_WARN 3 /* a lost or reaped seat, a recovery */
#define SHMSEM_LOG_ERROR 4

/* Called for each library log line at `level` or above, from whichever
 * thread logs, possibly while the library holds a segment lock: it must not
 * call shmsem functions other than the lock-free figures, and should return
 * quickly. */
typedef void (*shmsem_log_fn)(int level, const char* message, void* ctx);

/* Sends the library's log lines at min_level or above to fn (by default
 * they go to stderr, warnings and above). fn NULL restores the default. */
SHMSEM_API int shmsem_set_log_handler(shmsem_log_fn fn, void* ctx, int min_level);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHMSEM_SHMSEM_H */
