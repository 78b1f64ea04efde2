// open.cpp: how a process opens a segment: finding or creating the file,
// checking it before trusting it, initializing it under the init lock (or
// starting it over when its last user died), mapping it, and removing a
// segment nobody uses.

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "base/forking.hpp"
#include "base/log.hpp"
#include "shm/fastpath.hpp"
#include "shm/key.hpp"
#include "shm/segment.hpp"
#include "shm/segment_shared.hpp"
#include "shm/trust.hpp"
#include "sys/clock.hpp"
#include "sys/futex.hpp"
#include "sys/openers.hpp"
#include "sys/proc.hpp"
#include "sys/robust_mutex.hpp"

namespace shmsem::detail {

using namespace layout;

namespace {

void initialize(sys::shm_file& f, void* base, std::string_view key, int permits,
                const std::string& path, bool fencing, std::optional<Fairness> fairness) {
  auto* h = header(base);
  // Allocate before touching a byte: a full /dev/shm then fails here with
  // ENOSPC instead of killing us with SIGBUS on the first write. A crash
  // after this leaves a zero magic, which the next opener re-initializes.
  const auto cap = static_cast<std::uint32_t>(permits);
  int err = f.allocate(0, kHoldersOffset + sizeof(holder_record) * kInitialHolders);
  if (!err) err = f.allocate(kWaitersOffset, sizeof(waiter_slot) * kInitialWaiters);
  if (!err) err = f.allocate(kThreadsOffset, sizeof(thread_record) * kInitialThreads);
  if (!err) err = f.allocate(kLeasesOffset, sizeof(lease_slot) * cap);
  if (err) throw_segment_errno(path, "cannot allocate the segment", err);
  // Then mark the file as ours but unfinished, so a crash from here on is
  // recognized (problem::initializing) and the next opener starts over.
  std::memset(static_cast<void*>(h), 0, kHeaderRegion);
  h->magic = kMagic;
  h->layout_version = kLayoutVersion;
  h->format = format_word();
  h->init_state.store(kInitializing, std::memory_order_release);
#ifdef SHMSEM_TESTING
  if (auto hook = testing::current_hook.load()) hook(testing::point::initializing, key);
#endif
  std::memset(static_cast<void*>(holders(base)), 0, sizeof(holder_record) * kInitialHolders);
  std::memset(static_cast<void*>(waiters(base)), 0, sizeof(waiter_slot) * kInitialWaiters);
  std::memset(static_cast<void*>(threads(base)), 0, sizeof(thread_record) * kInitialThreads);
  std::memset(static_cast<void*>(leases(base)), 0, sizeof(lease_slot) * cap);
  h->key_size = static_cast<std::uint32_t>(key.size());
  std::memcpy(h->key, key.data(), key.size());
  h->created_realtime_ns = sys::realtime_now_ns();
  h->ewma_base_ns = sys::coarse_now_ns();
  if (int e = sys::robust_mutex_init(&h->mutex))
    throw_segment_errno(path, "cannot initialize the lock of", e);
  h->gate.store(make_gate(0, permits, 0));
  h->holder_slots.store(kInitialHolders);
  h->waiter_slots.store(kInitialWaiters);
  h->thread_slots.store(kInitialThreads);
  h->lease_slots.store(cap);
  h->earliest_expiry_ns.store(INT64_MAX);
  h->ewma.store(ewma_word(0.0f, 0));
  h->next_permit_id = 1;
  h->next_ticket = 1;
  // Tokens go on from the wall clock, not from 1: a fencing semaphore
  // removed while idle (gc) and created again must not hand out a token a
  // resource has already seen. One grant takes far longer than the
  // nanosecond a token counts, so the tokens never run ahead of the clock.
  h->next_fence = static_cast<std::uint64_t>(std::max<std::int64_t>(1, h->created_realtime_ns));
  h->fencing = fencing ? 1 : 0;
  // Barging unless asked: it keeps a fleet's seats busy (design.md, "Barging").
  h->fairness = fairness_code(fairness.value_or(Fairness::barging));
  // The name of the token files and the proof of their origin (tokens.hpp).
  if (int e = sys::random_u64(h->token_nonce);
      e != 0 || (e = sys::random_u64(h->token_secret)) != 0)
    throw_segment_errno(path, "cannot draw the token secret of", e);
  link_free_holders(h, holders(base), 0, kInitialHolders);
  link_free_waiters(h, waiters(base), 0, kInitialWaiters);
  h->init_state.store(kReady, std::memory_order_release);
}

errc errc_for(problem p) {
  switch (p) {
    case problem::bad_version:
    case problem::bad_format:
      return errc::layout_mismatch;
    case problem::truncated:
    case problem::too_small:
      return errc::truncated;
    default:
      return errc::bad_segment;
  }
}

void warn_if_settings_differ(const attachment& a, int permits, std::optional<Fairness> fairness) {
  if (permits > 0 && permits != a.capacity())
    log().warn(
        "semaphore '{}' exists with capacity {}; open() asked for {} and the existing "
        "capacity stands (use set_capacity to change it)",
        a.key, a.capacity(), permits);
  if (fairness && *fairness != a.fairness())
    log().warn(
        "semaphore '{}' exists with fairness {}; open() asked for {} and the existing "
        "policy stands (it is chosen when the segment is created)",
        a.key, to_string(a.fairness()), to_string(*fairness));
}

}  // namespace

namespace {

// Step 1 [registry]: a handle to a semaphore this process has attached
// already shares its attachment, unless its name now leads elsewhere.
attachment* share_attached(std::string_view key, const std::string& name, int permits,
                           const std::vector<std::string>& trusted_owners,
                           std::optional<Fairness> fairness) {
  for (attachment* a : attachments_of_process()) {
    if (a->name != name || a->dying) continue;
    struct ::stat st;
    // A removed file stays usable for those who have it, but a new open
    // must get the semaphore that now has the name.
    if (a->file->stat(st) != 0 || st.st_nlink == 0) continue;
    check_owner({st, a->file->fd(), a->path}, key, trusted_owners);
    ++a->handles;
    a->closing.store(false, std::memory_order_relaxed);
    for (thread_entry* e : a->entries) e->closing.store(false, std::memory_order_relaxed);
    warn_if_settings_differ(*a, permits, fairness);
    return a;
  }
  return nullptr;
}

// Step 2: opens (or creates) the file and checks it is a regular file of a
// trusted owner, before a byte of it is trusted.
std::unique_ptr<sys::shm_file> open_checked(std::string_view key, const std::string& name,
                                            const std::string& path, int permits, mode_t mode,
                                            const std::vector<std::string>& trusted_owners,
                                            struct ::stat& st) {
  int err = 0;
  bool created = false;
  auto file = sys::shm_file::open(name, permits > 0, mode, err, created);
  if (!file) {
    if (err == ENOENT && permits <= 0)
      throw SegmentError(make_error_code(errc::not_found),
                         "shmsem: no semaphore '" + std::string(key) + "' (" + path + ")");
    throw_segment_errno(path, "cannot open", err);
  }
  if ((err = file->stat(st)) != 0) throw_segment_errno(path, "cannot stat", err);
  if (!S_ISREG(st.st_mode))
    throw SegmentError(make_error_code(errc::bad_segment),
                       "shmsem: " + path + " is not a regular file (refused)");
  check_owner({st, file->fd(), path}, key, trusted_owners);  // before a byte of it is trusted
  return file;
}

// Who holds lock byte `byte` of the file at `path` exclusively, as the
// message of an open that timed out says it: "process 123 (worker),
// stopped", or why that cannot be told.
std::string describe_lock_holder(const std::string& path, std::uint64_t byte) {
  for (const sys::open_file& f : sys::open_files_under(path)) {
    if (f.path != path) continue;
    for (const sys::ofd_lock& l : f.locks) {
      if (l.start != byte || !l.exclusive) continue;
      const char state = sys::process_state(f.pid);
      const char* what = state == 'T' || state == 't' ? "stopped"
                         : state == 'Z'               ? "a zombie (exited, not yet waited for)"
                         : state == 'D'               ? "in uninterruptible sleep"
                         : state == 0                 ? "gone since"
                                                      : "running";
      return "process " + std::to_string(f.pid) + " (" + sys::process_command(f.pid) + "), " + what;
    }
  }
  return "a process this one cannot see (another user's, or in another PID namespace), or one "
         "that let go as we looked";
}

// Step 3: takes the init lock by `deadline`. False if the file was removed
// (by gc or remove) while we waited: open again.
bool lock_for_init(sys::shm_file& file, const std::string& path, std::int64_t deadline, int attempt,
                   struct ::stat& st) {
  if (!file.lock_until(kInitLockByte, true, deadline))
    throw SegmentError(make_error_code(errc::busy),
                       "shmsem: " + path +
                           ": the open timed out waiting for the segment's init lock, which "
                           "one process at a time holds while it creates, initializes, resets "
                           "or removes the segment; held by " +
                           describe_lock_holder(path, kInitLockByte));
  if (int err = file.stat(st); err != 0) throw_segment_errno(path, "cannot stat", err);
  if (st.st_nlink == 0) {
    // Removed (by gc or remove) while we waited for the init lock.
    if (attempt < 100) return false;
    throw SegmentError(make_error_code(errc::busy), "shmsem: " + path + " keeps being removed");
  }
  return true;
}

// Step 4: maps the file and says what is wrong with its contents, if
// anything; a segment of another key is refused here.
problem map_and_check(sys::shm_file& file, std::string_view key, const std::string& path,
                      struct ::stat& st) {
  int err = 0;
  if ((err = file.map(kMappingSize)) != 0) throw_segment_errno(path, "cannot map", err);
  void* base = file.base();
  auto size = static_cast<std::uint64_t>(st.st_size);
  bool key_mismatch = false;
  problem p = size == 0 ? problem::uninitialized
                        : validate(base, size, &key_mismatch, key.data(), key.size());
  // A table that grew since our fstat: the file grows before its length
  // is published, so the length validate() read may be newer than the
  // size. Truncated means the size stays short of it.
  for (int again = 0; p == problem::truncated && again < 1000; ++again) {
    if ((err = file.stat(st)) != 0) throw_segment_errno(path, "cannot stat", err);
    if (static_cast<std::uint64_t>(st.st_size) == size) break;
    size = static_cast<std::uint64_t>(st.st_size);
    p = validate(base, size, &key_mismatch, key.data(), key.size());
  }
  if (key_mismatch)
    throw SegmentError(
        make_error_code(errc::bad_segment),
        "shmsem: " + path + " holds another key ('" +
            std::string(header(base)->key, std::min<std::size_t>(header(base)->key_size, 255)) +
            "'), not '" + std::string(key) + "'");
  return p;
}

// The fast way in, without the init lock: a herd of openers must not pass
// through it one at a time. A process takes the settled byte (shared) only
// once it is attached, so another's settled lock proves that the segment is
// initialized and its live state trusted; and while we hold the attach byte
// shared, no reset or removal (each needs it exclusive) can begin. False,
// with nothing held: nobody has settled, an initializer, a reset or a
// removal holds the attach byte, or the file was removed; open the slow way.
bool join_live(sys::shm_file& file, std::string_view key, const std::string& path,
               struct ::stat& st) {
  if (!file.try_lock(kAttachLockByte, false)) return false;
  // Asked only now: a settled process seen before we held the attach byte
  // might have been the last, and a reset could have begun since.
  if (file.locked_by_other(kSettledLockByte) && file.stat(st) == 0 && st.st_nlink != 0 &&
      map_and_check(file, key, path, st) == problem::none) {
    file.try_lock(kSettledLockByte, false);
    return true;
  }
  file.unlock(kAttachLockByte);
  return false;
}

// The slow way in, under the init lock: true if no other process is
// attached, with the attach byte then held exclusively. A process that
// holds the attach byte without having settled is a joiner on its way in
// or out (join_live): when nobody has settled, it lets go at once, so wait
// for it rather than take a segment whose users all died for a live one.
bool alone_by(sys::shm_file& file, const std::string& path, std::int64_t deadline) {
  for (;;) {
    if (file.try_lock(kAttachLockByte, true)) return true;
    if (file.locked_by_other(kSettledLockByte)) return false;
    if (sys::precise_now_ns() >= deadline)
      throw SegmentError(make_error_code(errc::busy),
                         "shmsem: " + path +
                             ": the open timed out waiting for a process that holds the "
                             "segment's attach lock without having finished attaching");
    sys::yield();
  }
}

// Under the init lock, with the segment mapped and valid: true if a
// process holds a token of it. A process tree can keep its starter's token
// (shmsem run) without the segment open, so an attach byte nobody holds is
// not proof that nobody uses the segment.
bool tokens_held(std::string_view key, const std::string& path, void* base) {
  const segment_header* h = header(base);
  const token_files tokens(std::string(key), path, h->token_nonce, h->token_secret);
  return tokens.any_held_by_other(h->holder_slots.load());
}

// Step 5, under the init lock: the first process to attach (`alone`)
// initializes a new or half-made segment, and clears the live state of
// one whose users all died. A problem left over is an error.
void initialize_if_alone(sys::shm_file& file, std::string_view key, int permits,
                         const std::string& path, bool fencing, std::optional<Fairness> fairness,
                         bool alone, problem p) {
  if (alone) {
    if (p == problem::uninitialized || p == problem::initializing) {
      if (permits <= 0)
        throw SegmentError(make_error_code(errc::not_found),
                           "shmsem: " + path +
                               " was never fully initialized; open it with a capacity to "
                               "initialize it");
      if (p == problem::initializing)
        log().warn("semaphore '{}': its creator died during initialization; initializing {} again",
                   key, path);
      initialize(file, file.base(), key, permits, path, fencing, fairness);
    } else if (p == problem::none) {
      reset_live_state(file.base());
    }
  }
  if (p != problem::none && !(alone && (p == problem::uninitialized || p == problem::initializing)))
    throw SegmentError(make_error_code(errc_for(p)), "shmsem: " + path + " is " + to_string(p));
}

// Step 6 [registry]: the attachment of a mapped, ready segment, with its
// first handle.
attachment* register_attachment(std::string_view key, const std::string& name,
                                const std::string& path, const struct ::stat& st,
                                std::unique_ptr<sys::shm_file> file) {
  void* base = file->base();
  auto* a = new attachment;
  a->key = std::string(key);
  a->name = name;
  a->path = path;
  a->file_identity = {st.st_dev, st.st_ino};
  a->file = std::move(file);
  a->hdr = header(base);
  a->tokens = std::make_unique<token_files>(a->key, path, a->hdr->token_nonce, a->hdr->token_secret,
                                            st.st_mode, st.st_uid, st.st_gid);
  a->holders = layout::holders(base);
  a->waiters = layout::waiters(base);
  a->threads = layout::threads(base);
  a->leases = layout::leases(base);
  a->pid_ns = sys::self_pid_ns();
  a->handles = 1;
  a->serial = next_attachment_serial();
  attachments_of_process().push_back(a);
  return a;
}

}  // namespace

attachment* attachment::acquire_handle(std::string_view key, int permits, mode_t mode,
                                       std::chrono::milliseconds open_timeout,
                                       const std::vector<std::string>& trusted_owners, bool fencing,
                                       std::optional<Fairness> fairness) {
  validate_key(key);
  const std::string name = key_to_name(key);
  const std::string path = sys::shm_path(name);
  handle_fork_once();
  const std::int64_t deadline =
      sys::precise_now_ns() + std::chrono::nanoseconds(open_timeout).count();

  auto g = registry_lock();
  if (attachment* a = share_attached(key, name, permits, trusted_owners, fairness)) return a;
  for (int attempt = 0;; ++attempt) {
    struct ::stat st;
    auto file = open_checked(key, name, path, permits, mode, trusted_owners, st);
    if (join_live(*file, key, path, st)) {
      attachment* a = register_attachment(key, name, path, st, std::move(file));
      warn_if_settings_differ(*a, permits, fairness);
      return a;
    }
    if (!lock_for_init(*file, path, deadline, attempt, st)) continue;
    const bool alone_attached = alone_by(*file, path, deadline);
    const problem p = map_and_check(*file, key, path, st);
    const bool alone =
        alone_attached && !(p == problem::none && tokens_held(key, path, file->base()));
    initialize_if_alone(*file, key, permits, path, fencing, fairness, alone, p);
    // Settled before the attach byte is shared: a joiner that gets in then
    // finds the proof it needs.
    file->try_lock(kSettledLockByte, false);
    file->try_lock(kAttachLockByte, false);  // from exclusive to shared, atomically
    file->unlock(kInitLockByte);
    attachment* a = register_attachment(key, name, path, st, std::move(file));
    warn_if_settings_differ(*a, permits, fairness);
    return a;
  }
}

namespace {
// The token files of the segment in `file`, if its header is of this
// layout and ready: their nonce, and how many holder records it has.
bool read_token_names(const sys::shm_file& file, std::uint64_t& nonce, std::uint32_t& records,
                      std::uint64_t& secret) {
  alignas(segment_header) unsigned char bytes[sizeof(segment_header)];
  if (file.read_at(0, bytes, sizeof bytes) != 0) return false;
  const segment_header* h = header(bytes);
  if (h->magic != kMagic || h->layout_version != kLayoutVersion || h->format != format_word() ||
      h->init_state.load() != kReady)
    return false;
  nonce = h->token_nonce;
  secret = h->token_secret;
  records = std::min(h->holder_slots.load(), kMaxHolders);
  return true;
}
}  // namespace

bool attachment::remove_if_unused(std::string_view key) {
  validate_key(key);
  const std::string name = key_to_name(key);
  const std::string path = sys::shm_path(name);
  int err = 0;
  bool created = false;
  auto file = sys::shm_file::open(name, false, 0600, err, created);
  if (!file) {
    if (err == ENOENT) return false;
    throw_segment_errno(path, "cannot open", err);
  }
  struct ::stat st;
  if (file->stat(st) != 0 || !S_ISREG(st.st_mode)) return false;
  // The init lock keeps a new opener out until we are done; it then finds
  // the file unlinked and starts over with a fresh one.
  if (!file->lock_until(kInitLockByte, true, sys::precise_now_ns() + 2'000'000'000)) return false;
  if (file->stat(st) != 0 || st.st_nlink == 0) return false;
  if (!file->try_lock(kAttachLockByte, true)) return false;  // someone is attached
  std::uint64_t nonce = 0, secret = 0;
  std::uint32_t records = 0;
  const bool has_tokens = read_token_names(*file, nonce, records, secret);
  if (has_tokens && token_files(std::string(key), path, nonce, secret).any_held_by_other(records))
    return false;  // a process tree holds a token (shmsem run)
  sys::file_id now_there;
  if (sys::shm_stat_name(name, now_there) != 0 ||
      !(now_there == sys::file_id{st.st_dev, st.st_ino}))
    return false;
  if (sys::shm_remove(name) != 0) return false;
  // Nobody is attached and no token is held: the token files go (a new
  // segment of the key has new ones).
  if (has_tokens) token_files::sweep_all(nonce, records);
  return true;
}

std::optional<removed_segment> attachment::if_removed() const noexcept {
  struct ::stat st;
  if (file->stat(st) != 0 || st.st_nlink != 0) return std::nullopt;
  return removed_segment{hdr->token_nonce, std::min(hdr->holder_slots.load(), kMaxHolders)};
}

void removed_segment::sweep_token_files() const noexcept {
  // Those still attached may hold tokens in some (theirs stay), or take
  // one later in a file swept now (they make it again: tokens.hpp).
  token_files::sweep_all(nonce, records);
}

bool attachment::remove(std::string_view key) {
  validate_key(key);
  const std::string name = key_to_name(key);
  const std::string path = sys::shm_path(name);
  int err = 0;
  auto file = sys::shm_file::open_read_only(name, err);
  std::uint64_t nonce = 0, secret = 0;
  std::uint32_t records = 0;
  const bool has_tokens = file && read_token_names(*file, nonce, records, secret);
  if ((err = sys::shm_remove(name)) != 0) {
    if (err == ENOENT) return false;
    throw_segment_errno(path, "cannot remove", err);
  }
  // Those still attached keep using the removed segment, and the token
  // files in which they hold tokens; the last of them to let go sweeps
  // those (finish_detach), and `shmsem gc` sweeps what a user that exited
  // without letting go left behind.
  if (has_tokens) token_files::sweep_all(nonce, records);
  return true;
}

}  // namespace shmsem::detail
