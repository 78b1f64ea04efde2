// sys/users.cpp: file owners, and user and group names (see users.hpp).

#include "sys/users.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
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

std::string group_name(gid_t gid) {
  return name_of<struct group>(gid, ::getgrgid_r, [](const group& g) { return g.gr_name; });
}

int lstat_path(const std::string& path, struct ::stat& st) {
  return ::lstat(path.c_str(), &st) == 0 ? 0 : errno;
}

}  // namespace shmsem::sys
