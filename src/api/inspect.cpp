// inspect.cpp: reading a semaphore without attaching to it or trusting it
// (Semaphore::inspect, owner), and finding the processes that use it
// (Semaphore::users). Monitors and admin tools read through these, so they
// never write to a segment, whoever owns it.
//
// inspect() copies the header and the tables it needs into private memory
// with pread, validates the copy, and builds the snapshot from the copy
// with the same code as Semaphore::snapshot(). A segment that another user
// made is thus never mapped: its owner cannot change a value between the
// check and the use, nor truncate the file under a mapping (SIGBUS).
#include <shmsem/semaphore.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <new>
#include <set>

#include "base/backend.hpp"
#include "base/handle.hpp"
#include "shm/backend.hpp"
#include "shm/key.hpp"
#include "shm/segment.hpp"
#include "shm/trust.hpp"
#include "sys/openers.hpp"
#include "sys/proc.hpp"
#include "sys/shm.hpp"
#include "sys/users.hpp"

namespace shmsem {

namespace detail {

namespace {

struct aligned_free {
  void operator()(std::byte* p) const {
    ::operator delete (p, std::align_val_t{layout::kCacheLine});
  }
};
using aligned_bytes = std::unique_ptr<std::byte, aligned_free>;

aligned_bytes allocate(std::size_t n) {
  return aligned_bytes(static_cast<std::byte*>(::operator new (
      std::max<std::size_t>(n, layout::kCacheLine), std::align_val_t{layout::kCacheLine})));
}

errc errc_for(layout::problem p) {
  switch (p) {
    case layout::problem::bad_version:
    case layout::problem::bad_format:
      return errc::layout_mismatch;
    case layout::problem::truncated:
    case layout::problem::too_small:
      return errc::truncated;
    case layout::problem::uninitialized:
    case layout::problem::initializing:
      return errc::busy;
    default:
      return errc::bad_segment;
  }
}

}  // namespace

/// A private copy of a segment's header, holder records, thread records and
/// the lease slots handed out so far, and an attachment that points into it
/// (never registered, never mapped, never locked). Its file is a read-only
/// descriptor, kept for asking the kernel which liveness tokens are held.
struct segment_copy {
  struct ::stat st {};
  aligned_bytes header, holders, threads, leases;
  std::unique_ptr<attachment> att;
};

namespace {

// `key` null: any key (the caller learns it from the copy).
std::unique_ptr<segment_copy> read_copy(const std::string& name, const std::string& path,
                                        const std::string* key) {
  int err = 0;
  auto file = sys::shm_file::open_read_only(name, err);
  if (!file) {
    if (err == ENOENT)
      throw SegmentError(make_error_code(errc::not_found),
                         "shmsem: no semaphore " + (key ? "'" + *key + "' (" + path + ")" : path));
    throw_segment_errno(path, "cannot open", err);
  }
  auto c = std::make_unique<segment_copy>();
  if ((err = file->stat(c->st)) != 0) throw_segment_errno(path, "cannot stat", err);
  if (!S_ISREG(c->st.st_mode))
    throw SegmentError(make_error_code(errc::bad_segment),
                       "shmsem: " + path + " is not a regular file (refused)");
  // The header first, then the size: a table grows the file before it
  // publishes its new length.
  c->header = allocate(layout::kHeaderRegion);
  if ((err = file->read_at(0, c->header.get(), layout::kHeaderRegion)) != 0)
    throw_segment_errno(path, "cannot read", err);
  struct ::stat now;
  if ((err = file->stat(now)) != 0) throw_segment_errno(path, "cannot stat", err);
  bool key_mismatch = false;
  const auto p =
      now.st_size == 0
          ? layout::problem::uninitialized
          : layout::validate(c->header.get(), static_cast<std::uint64_t>(now.st_size),
                             &key_mismatch, key ? key->data() : nullptr, key ? key->size() : 0);
  if (p == layout::problem::uninitialized || p == layout::problem::initializing) {
    // Whoever creates or repairs a segment holds its init lock meanwhile;
    // a file nobody is initializing was left unfinished by a dead creator,
    // and attach() calls it not found: the same here.
    if (file->locked_by_other(layout::kInitLockByte))
      throw SegmentError(make_error_code(errc::busy),
                         "shmsem: " + path +
                             " is being initialized by another process (or one stopped while "
                             "doing so)");
    throw SegmentError(
        make_error_code(errc::not_found),
        "shmsem: " + path +
            " was never fully initialized; open it with a capacity to initialize it");
  }
  if (key_mismatch)
    throw SegmentError(make_error_code(errc::bad_segment),
                       "shmsem: " + path + " holds another key, not '" + *key + "'");
  if (p != layout::problem::none)
    throw SegmentError(make_error_code(errc_for(p)),
                       "shmsem: " + path + " is " + layout::to_string(p));
  // Validated, and private: no one can change these counts from now on.
  auto* h = layout::header(c->header.get());
  const std::uint32_t nh = h->holder_slots.load(std::memory_order_relaxed);
  const std::uint32_t nt = h->thread_slots.load(std::memory_order_relaxed);
  const std::uint32_t hwm = h->lease_hwm.load(std::memory_order_relaxed);
  c->holders = allocate(sizeof(layout::holder_record) * nh);
  c->threads = allocate(sizeof(layout::thread_record) * nt);
  c->leases = allocate(sizeof(layout::lease_slot) * hwm);
  if ((err = file->read_at(layout::kHoldersOffset, c->holders.get(),
                           sizeof(layout::holder_record) * nh)) != 0 ||
      (err = file->read_at(layout::kThreadsOffset, c->threads.get(),
                           sizeof(layout::thread_record) * nt)) != 0 ||
      (err = file->read_at(layout::kLeasesOffset, c->leases.get(),
                           sizeof(layout::lease_slot) * hwm)) != 0)
    throw_segment_errno(path, "cannot read", err);
  auto a = std::make_unique<attachment>();
  a->key = key ? *key : std::string(h->key, h->key_size);
  a->name = name;
  a->path = path;
  a->file_identity = {c->st.st_dev, c->st.st_ino};
  a->file = std::move(file);
  a->hdr = h;
  a->tokens = std::make_unique<token_files>(a->key, path, h->token_nonce, h->token_secret);
  a->holders = reinterpret_cast<layout::holder_record*>(c->holders.get());
  a->threads = reinterpret_cast<layout::thread_record*>(c->threads.get());
  a->leases = reinterpret_cast<layout::lease_slot*>(c->leases.get());
  a->pid_ns = sys::self_pid_ns();
  c->att = std::move(a);
  return c;
}

}  // namespace

/// Builds snapshots of a copy with the shared-memory backend's own code,
/// through a handle that is never registered and a backend that only
/// borrows the copy: their destruction must not detach anything.
struct inspection {
  static Snapshot snapshot(attachment& a, const Options& options) {
    handle h;
    h.att = &a;
    h.opts = options;
    return segment_backend(&a, false).snapshot(h);
  }
};

namespace {

std::string name_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The users of the segments named in `files`, grouped by file name, and of
// `also` (a path that no descriptor may show: its holders may be another
// user's processes).
std::vector<SegmentUser> users_of(std::vector<sys::open_file> files, const std::string& also) {
  std::map<std::string, std::vector<sys::open_file>> by_path;
  if (!also.empty()) by_path[also];
  for (auto& f : files) by_path[f.path].push_back(std::move(f));
  std::vector<SegmentUser> out;
  for (auto& [path, list] : by_path) {
    const std::string name = name_of(path);
    sys::file_id current;
    const bool named = sys::shm_stat_name(name, current) == 0;
    auto is_current = [&](const sys::open_file& f) {
      return named && !f.deleted && sys::file_id{f.dev, f.ino} == current;
    };
    std::unique_ptr<segment_copy> copy;
    if (named && (path == also || std::any_of(list.begin(), list.end(), is_current))) {
      try {
        std::string key;
        if (auto k = name_to_key(name)) key = *k;
        copy = read_copy(name, path, key.empty() ? nullptr : &key);
      } catch (const std::exception&) {
        // Unreadable or not a segment: its users are still listed.
      }
    }
    std::string key;
    if (auto k = name_to_key(name))
      key = *k;
    else if (copy)
      key = copy->att->key;
    // Seats and waits per holder record, from the copy.
    std::vector<int> seats;
    if (copy) {
      const attachment& a = *copy->att;
      seats.assign(a.hdr->holder_slots.load(), 0);
      const std::uint32_t hwm = a.hdr->lease_hwm.load();
      for (std::uint32_t i = 0; i < hwm; ++i) {
        const auto& l = a.leases[i];
        const std::uint32_t holder = l.holder.load();
        if (layout::state_kind(l.state.load()) == layout::kSlotHeld && holder < seats.size())
          seats[holder] += std::max(0, l.weight.load());
      }
    }
    // Tokens are held in the token files, which a process may hold without
    // the segment open (shmsem run): their holders are users too.
    std::string token_prefix;
    if (copy) {
      token_prefix = sys::shm_path(token_file_prefix(copy->att->hdr->token_nonce));
      for (auto& f : sys::open_files_under(token_prefix))
        if (!f.deleted) list.push_back(std::move(f));
    }
    auto in_token_file = [&](const sys::open_file& f) {
      return !token_prefix.empty() && f.path.compare(0, token_prefix.size(), token_prefix) == 0;
    };
    auto record_pid = [&](std::uint32_t i) {
      const auto& r = copy->att->holders[i];
      return r.pid_ns.load() == copy->att->pid_ns ? r.pid.load() : 0;
    };
    std::set<std::uint32_t> tokens_seen;
    std::map<std::pair<pid_t, bool>, SegmentUser> by_process;
    std::map<std::pair<pid_t, bool>, std::set<std::uint32_t>> tokens_of;
    for (const auto& f : list) {
      const bool current_file = is_current(f) || in_token_file(f);
      SegmentUser& u = by_process[{f.pid, !current_file}];
      auto& mine = tokens_of[{f.pid, !current_file}];
      if (u.pid == 0) {
        u.key = key;
        u.path = path;
        u.pid = f.pid;
        u.command = sys::process_command(f.pid);
        u.removed_copy = !current_file;
      }
      for (const auto& l : f.locks) {
        if (l.start == layout::kAttachLockByte) u.attached = true;
        if (!l.exclusive || l.start < layout::kTokenBase) continue;
        u.attached = true;  // with the segment open or not, it holds a seat's token
        const std::uint64_t index = l.start - layout::kTokenBase;
        if (!current_file || !copy || index >= seats.size()) continue;
        const auto i = static_cast<std::uint32_t>(index);
        tokens_seen.insert(i);
        if (!mine.insert(i).second) continue;  // another descriptor of the same description
        u.seats += seats[i];
        u.waiting += static_cast<int>(copy->att->holders[i].waiting.load());
        if (u.holder_pid == 0) u.holder_pid = record_pid(i);
      }
    }
    for (auto& [k, u] : by_process) out.push_back(std::move(u));
    // Holders this process cannot see in /proc (another user's, another
    // PID namespace's): known from their records while their token is held.
    if (copy) {
      const attachment& a = *copy->att;
      for (std::uint32_t i = 0; i < seats.size(); ++i) {
        if (tokens_seen.count(i) || a.holders[i].state.load() != layout::kHolderAttached ||
            !a.tokens->held_by_other(i))
          continue;
        SegmentUser u;
        u.key = key;
        u.path = path;
        u.pid = record_pid(i);
        const char* comm = a.holders[i].comm;
        u.command.assign(comm, strnlen(comm, sizeof a.holders[i].comm));
        u.attached = true;
        u.seats = seats[i];
        u.waiting = static_cast<int>(a.holders[i].waiting.load());
        u.holder_pid = u.pid;
        out.push_back(std::move(u));
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const SegmentUser& x, const SegmentUser& y) {
    if (x.path != y.path) return x.path < y.path;
    return x.pid < y.pid;
  });
  return out;
}

}  // namespace

}  // namespace detail

Snapshot Semaphore::inspect(std::string_view key, const Options& options) {
  // A backend with no file to copy: a short-lived handle reads it, and the
  // server's own access control decides who may.
  if (!detail::backend_of(key).capabilities.segment_file) return attach(key, options).snapshot();
  detail::validate_key(key);
  detail::validate_trusted_owners(options.trusted_owners);
  const std::string name = detail::key_to_name(key);
  const std::string k(key);
  auto copy = detail::read_copy(name, sys::shm_path(name), &k);
  return detail::inspection::snapshot(*copy->att, options);
}

SegmentOwner Semaphore::owner(std::string_view key, const Options& options) {
  detail::validate_key(key);
  detail::validate_trusted_owners(options.trusted_owners);
  const std::string path = segment_path(key);
  struct ::stat st;
  if (const int err = sys::lstat_path(path, st)) {
    if (err == ENOENT)
      throw SegmentError(make_error_code(errc::not_found),
                         "shmsem: no semaphore '" + std::string(key) + "' (" + path + ")");
    detail::throw_segment_errno(path, "cannot stat", err);
  }
  return detail::describe_owner({st, -1, path}, options.trusted_owners);
}

std::vector<SegmentUser> Semaphore::users(std::string_view key) {
  if (!detail::backend_of(key).capabilities.segment_file) return {};
  const std::string path = segment_path(key);
  auto files = sys::open_files_under(path);
  std::erase_if(files, [&](const sys::open_file& f) { return f.path != path; });
  return detail::users_of(std::move(files), path);
}

std::vector<SegmentUser> Semaphore::all_users() {
  return detail::users_of(sys::open_files_under(sys::shm_path(detail::kNamePrefix)), {});
}

bool Semaphore::name_still_points_here() const {
  return detail::name_points_here(*h_->att);
}

}  // namespace shmsem
