// sys/users.hpp: who owns a file, and the names of users and groups. The
// ownership policy (trust.hpp) decides with these; nothing here decides.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>

namespace shmsem::sys {

/// The calling process's effective uid (the one the kernel checks at open).
uid_t effective_uid();

/// The name of user `uid` (getpwuid_r), or "" when the uid has no entry.
std::string user_name(uid_t uid);

/// The name of group `gid` (getgrgid_r), or "" when the gid has no entry.
std::string group_name(gid_t gid);

/// lstat of `path` (a symlink is described, not followed). Returns errno or 0.
int lstat_path(const std::string& path, struct ::stat& st);

}  // namespace shmsem::sys
