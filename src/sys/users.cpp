// sys/users.cpp: file owners, their ACLs, and user and group names (see
// users.hpp).

#include "sys/users.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

namespace shmsem::sys {

uid_t effective_uid() {
  return ::geteuid();
}

namespace {

// Calls a getXXid_r function with a buffer that grows while it is too small;
// returns the entry's name, or "" when there is none.
template <class Entry, class Id, class Lookup, class Name>
std::string name_of(Id id, Lookup lookup, Name name) {
  std::vector<char> buf(1024);
  for (;;) {
    Entry entry;
    Entry* found = nullptr;
    const int r = lookup(id, &entry, buf.data(), buf.size(), &found);
    if (r == ERANGE && buf.size() < (1u << 20)) {
      buf.resize(buf.size() * 4);
      continue;
    }
    return r == 0 && found ? std::string(name(*found)) : std::string();
  }
}

}  // namespace

std::string user_name(uid_t uid) {
  return name_of<struct passwd>(uid, ::getpwuid_r, [](const passwd& p) { return p.pw_name; });
}

bool is_user(const std::string& name) {
  return !name_of<struct passwd>(name.c_str(), ::getpwnam_r, [](const passwd& p) {
            return p.pw_name;
          }).empty();
}

std::string group_name(gid_t gid) {
  return name_of<struct group>(gid, ::getgrgid_r, [](const group& g) { return g.gr_name; });
}

int lstat_path(const std::string& path, struct ::stat& st) {
  return ::lstat(path.c_str(), &st) == 0 ? 0 : errno;
}

namespace {

// The kernel's form of a POSIX ACL (linux/posix_acl_xattr.h), little-endian
// on every architecture: a version word, then one entry per tag.
constexpr std::uint32_t kAclVersion = 2;
constexpr std::uint16_t kAclUser = 0x02;   // a named user
constexpr std::uint16_t kAclGroup = 0x08;  // a named group
constexpr std::uint16_t kAclMask = 0x10;   // the most a named entry or the group may have
constexpr std::uint16_t kAclWrite = 0x02;
constexpr const char* kAccessAcl = "system.posix_acl_access";

std::uint32_t little_endian(const unsigned char* p, int bytes) {
  std::uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Reads the access ACL with `get` (fgetxattr or lgetxattr), growing the
// buffer while it is too small. Returns errno or 0; ENODATA: none.
template <class Get>
int read_acl(Get get, std::vector<unsigned char>& buf) {
  buf.resize(256);
  for (;;) {
    const ssize_t n = get(buf.data(), buf.size());
    if (n >= 0) {
      buf.resize(static_cast<std::size_t>(n));
      return 0;
    }
    if (errno != ERANGE || buf.size() >= (1u << 20)) return errno;
    buf.resize(buf.size() * 4);
  }
}

acl_grant parse(const std::vector<unsigned char>& acl, uid_t owner, gid_t group) {
  if (acl.size() < 4 || (acl.size() - 4) % 8 != 0 || little_endian(acl.data(), 4) != kAclVersion)
    return acl_grant::unreadable;
  std::uint32_t mask = 07;  // no mask entry: no named entry either
  bool named_writer = false;
  for (std::size_t off = 4; off < acl.size(); off += 8) {
    const std::uint32_t tag = little_endian(&acl[off], 2);
    const std::uint32_t perm = little_endian(&acl[off + 2], 2);
    const std::uint32_t id = little_endian(&acl[off + 4], 4);
    if (tag == kAclMask) mask = perm;
    if ((perm & kAclWrite) == 0) continue;
    if ((tag == kAclUser && id != owner) || (tag == kAclGroup && id != group)) named_writer = true;
  }
  return named_writer && (mask & kAclWrite) ? acl_grant::named_writers : acl_grant::none;
}

acl_grant verdict(int err, const std::vector<unsigned char>& acl, uid_t owner, gid_t group) {
  // No ACL, or a file system without them (ENOTSUP, which is EOPNOTSUPP on Linux).
  if (err == ENODATA || err == ENOTSUP) return acl_grant::none;
  if (err) return acl_grant::unreadable;
  return parse(acl, owner, group);
}

}  // namespace

acl_grant acl_writers(int fd, uid_t owner, gid_t group) {
  std::vector<unsigned char> acl;
  const int err =
      read_acl([fd](void* b, std::size_t n) { return ::fgetxattr(fd, kAccessAcl, b, n); }, acl);
  return verdict(err, acl, owner, group);
}

acl_grant acl_writers(const std::string& path, uid_t owner, gid_t group) {
  std::vector<unsigned char> acl;
  const int err = read_acl(
      [&path](void* b, std::size_t n) { return ::lgetxattr(path.c_str(), kAccessAcl, b, n); }, acl);
  return verdict(err, acl, owner, group);
}

int drop_access_acl(int fd) {
  if (::fremovexattr(fd, kAccessAcl) == 0) return 0;
  return errno == ENODATA || errno == ENOTSUP ? 0 : errno;
}

}  // namespace shmsem::sys
