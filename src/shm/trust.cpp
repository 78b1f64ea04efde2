// trust.cpp: whose segments this process accepts, and whether the name it
// opened still leads to the segment it uses.

#include "shm/trust.hpp"

#include <shmsem/errors.hpp>

#include <cstdio>
#include <stdexcept>

#include "base/log.hpp"
#include "shm/segment.hpp"
#include "sys/clock.hpp"
#include "sys/users.hpp"

namespace shmsem::detail {

namespace {

// How often a waiter looks at the name: an lstat a second is nothing next
// to the 50 wakeups a second of the head waiter.
constexpr std::int64_t kNameCheckIntervalNs = 1'000'000'000;

bool is_decimal(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

bool named_in(uid_t uid, const std::vector<std::string>& owners) {
  if (owners.empty()) return false;
  const std::string number = std::to_string(uid);
  bool names = false;
  for (const auto& o : owners) {
    if (o == number) return true;
    names |= !is_decimal(o);
  }
  if (!names) return false;
  // Compared by the owner's name, so a name that is no user never matches.
  const std::string name = sys::user_name(uid);
  if (name.empty()) return false;
  for (const auto& o : owners)
    if (o == name) return true;
  return false;
}

// Why a process does not accept a file, if it does not.
enum class distrust { none, root_is_strict, world_writable, acl_writers, acl_unreadable };

distrust judge(const file_status& f, uid_t euid, const std::vector<std::string>& trusted_owners) {
  const struct ::stat& st = f.st;
  if (st.st_uid == euid || st.st_uid == 0) return distrust::none;
  distrust why = distrust::root_is_strict;
  if (euid != 0) {
    if (st.st_mode & S_IWOTH) {
      why = distrust::world_writable;
    } else {
      // Read only now: the owner's own files, root's and a root process's
      // verdicts need no ACL.
      const sys::acl_grant g = f.fd >= 0 ? sys::acl_writers(f.fd, st.st_uid, st.st_gid)
                                         : sys::acl_writers(f.path, st.st_uid, st.st_gid);
      if (g == sys::acl_grant::none) return distrust::none;
      why = g == sys::acl_grant::named_writers ? distrust::acl_writers : distrust::acl_unreadable;
    }
  }
  return named_in(st.st_uid, trusted_owners) ? distrust::none : why;
}

const char* why_text(distrust d) {
  switch (d) {
    case distrust::root_is_strict:
      return "a process running as root trusts only root's segments";
    case distrust::world_writable:
      return "the file is writable by every user";
    case distrust::acl_writers:
      return "the file's ACL lets another user or group write it (getfacl shows whom)";
    case distrust::acl_unreadable:
      return "the file's ACL cannot be read, so it may let another user or group write it";
    case distrust::none:
      break;
  }
  return "";
}

std::string mode_text(unsigned mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

}  // namespace

void validate_trusted_owners(const std::vector<std::string>& owners) {
  for (const auto& o : owners) {
    if (o.empty())
      throw std::invalid_argument("shmsem: Options::trusted_owners holds an empty user name");
    if (!is_decimal(o) && !sys::is_user(o))
      throw std::invalid_argument("shmsem: trusted_owners names '" + o +
                                  "', which is no user of this host");
  }
}

bool owner_trusted(const file_status& f, uid_t euid,
                   const std::vector<std::string>& trusted_owners) {
  return judge(f, euid, trusted_owners) == distrust::none;
}

SegmentOwner describe_owner(const file_status& f, const std::vector<std::string>& trusted_owners) {
  const struct ::stat& st = f.st;
  SegmentOwner o;
  o.uid = st.st_uid;
  o.user = sys::user_name(st.st_uid);
  o.gid = st.st_gid;
  o.group = sys::group_name(st.st_gid);
  o.mode = st.st_mode & 07777;
  o.trusted = owner_trusted(f, sys::effective_uid(), trusted_owners);
  return o;
}

std::string owner_text(const SegmentOwner& o) {
  if (o.user.empty()) return "uid " + std::to_string(o.uid);
  return o.user + " (uid " + std::to_string(o.uid) + ")";
}

void check_owner(const file_status& f, std::string_view key,
                 const std::vector<std::string>& trusted_owners) {
  const uid_t euid = sys::effective_uid();
  const distrust d = judge(f, euid, trusted_owners);
  if (d == distrust::none) return;
  const std::string& path = f.path;
  SegmentOwner o = describe_owner(f, {});
  const std::string who = o.user.empty() ? std::to_string(o.uid) : o.user;
  const std::string why = why_text(d);
  throw SegmentError(
      make_error_code(errc::untrusted_owner),
      "shmsem: semaphore '" + std::string(key) + "' (" + path + ") is owned by " + owner_text(o) +
          ", mode " + mode_text(o.mode) + ", and this process (uid " + std::to_string(euid) +
          ") does not trust it: " + why +
          ". Whoever creates a key's file in /dev/shm (writable by every user) sets its "
          "capacity and can take or release its seats, so nothing was read from it. To share "
          "this semaphore with " +
          who + " on purpose, trust the owner: Options::trusted_owners = {\"" + who +
          "\"}, or --trust-owner " + who +
          " with semtop and the shmsem tools. Otherwise remove it (as root or " + who +
          ": shmsem rm " + std::string(key) + ") and open the key again.");
}

bool name_points_here(const attachment& a) {
  sys::file_id now;
  return sys::shm_stat_name(a.name, now) == 0 && now == a.file_identity;
}

void watch_name(attachment& a) noexcept {
  const std::int64_t now = sys::coarse_now_ns();
  if (now < a.name_check_due.load(std::memory_order_relaxed)) return;
  a.name_check_due.store(now + kNameCheckIntervalNs, std::memory_order_relaxed);
  if (a.name_lost.load(std::memory_order_relaxed) || name_points_here(a)) return;
  if (a.name_lost.exchange(true)) return;
  try {
    log().warn(
        "semaphore '{}': its segment {} was removed or replaced while this process uses it; "
        "this process keeps the old copy, and processes that open '{}' now get another "
        "semaphore: the bound is split in two until this process opens the key again",
        a.key, a.path, a.key);
  } catch (...) {
    // Logging must not end a wait.
  }
}

void describe_segment(const attachment& a, const std::vector<std::string>& trusted_owners,
                      Snapshot& s) {
  struct ::stat st;
  if (a.file->stat(st) == 0) s.owner = describe_owner({st, a.file->fd(), a.path}, trusted_owners);
  s.name_still_points_here = name_points_here(a);
}

}  // namespace shmsem::detail
