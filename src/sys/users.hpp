// sys/users.hpp: who owns a file, whom its POSIX ACL lets write it, and the
// names of users and groups. The ownership policy (trust.hpp) decides with
// these; nothing here decides.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>

namespace shmsem::sys {

/// The calling process's effective uid (the one the kernel checks at open).
uid_t effective_uid();

/// The name of user `uid` (getpwuid_r), or "" when the uid has no entry.
std::string user_name(uid_t uid);

/// Whether `name` is a user of this host (getpwnam_r finds it).
bool is_user(const std::string& name);

/// The name of group `gid` (getgrgid_r), or "" when the gid has no entry.
std::string group_name(gid_t gid);

/// lstat of `path` (a symlink is described, not followed). Returns errno or 0.
int lstat_path(const std::string& path, struct ::stat& st);

/// What a file's POSIX access ACL lets others do beyond its permission bits.
enum class acl_grant {
  none,           // no extended ACL (or no ACLs on this file system), or no write grant
  named_writers,  // a named user other than the owner, or a named group other
                  // than the file's, may write it (the mask allowing)
  unreadable,     // the ACL could not be read or parsed
};

/// Reads the access ACL (the system.posix_acl_access xattr) of the open
/// file `fd`, whose owner is `owner` and group `group`.
acl_grant acl_writers(int fd, uid_t owner, gid_t group);

/// The same for `path`, not following a symlink.
acl_grant acl_writers(const std::string& path, uid_t owner, gid_t group);

/// Removes the access ACL of `fd` (inherited from a default ACL of its
/// directory), leaving the permission bits alone. Returns errno or 0; a
/// file without one, or a file system without ACLs, is 0.
int drop_access_acl(int fd);

}  // namespace shmsem::sys
