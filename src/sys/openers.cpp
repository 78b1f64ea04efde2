// sys/openers.cpp: which processes have a file open, from /proc (see
// openers.hpp).

#include "sys/openers.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace shmsem::sys {

namespace {

bool all_digits(const char* s) {
  if (*s == '\0') return false;
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return false;
  return true;
}

std::string read_text(int dirfd, const char* name) {
  const int fd = ::openat(dirfd, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

// "lock:\t1: OFDLCK ADVISORY  WRITE -1 00:1b:2 1099511627840 1099511627840"
void parse_locks(const std::string& fdinfo, std::vector<ofd_lock>& out) {
  std::istringstream in(fdinfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 5, "lock:") != 0) continue;
    std::istringstream f(line.substr(5));
    std::string id, kind, advisory, type, pid, inode, start, end;
    if (!(f >> id >> kind >> advisory >> type >> pid >> inode >> start >> end)) continue;
    if (kind != "OFDLCK") continue;
    ofd_lock l;
    l.exclusive = type == "WRITE";
    l.start = std::strtoull(start.c_str(), nullptr, 10);
    out.push_back(l);
  }
}

void scan_process(const char* pid_name, const std::string& prefix, std::vector<open_file>& out) {
  const std::string base = std::string("/proc/") + pid_name;
  const int fd_dir = ::open((base + "/fd").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_dir < 0) return;  // gone, or another user's process
  DIR* d = ::fdopendir(fd_dir);
  if (!d) {
    ::close(fd_dir);
    return;
  }
  int info_dir = -1;
  constexpr std::string_view kDeleted = " (deleted)";
  while (dirent* e = ::readdir(d)) {
    if (!all_digits(e->d_name)) continue;
    char target[4096];
    const ssize_t n = ::readlinkat(fd_dir, e->d_name, target, sizeof target - 1);
    if (n <= 0) continue;
    std::string path(target, static_cast<std::size_t>(n));
    if (path.compare(0, prefix.size(), prefix) != 0) continue;
    open_file f;
    f.pid = static_cast<pid_t>(std::atol(pid_name));
    f.fd = std::atoi(e->d_name);
    if (path.size() > kDeleted.size() &&
        path.compare(path.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0) {
      f.deleted = true;
      path.resize(path.size() - kDeleted.size());
    }
    f.path = std::move(path);
    struct ::stat st;
    if (::fstatat(fd_dir, e->d_name, &st, 0) != 0) continue;
    f.dev = st.st_dev;
    f.ino = st.st_ino;
    if (info_dir < 0)
      info_dir = ::open((base + "/fdinfo").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (info_dir >= 0) parse_locks(read_text(info_dir, e->d_name), f.locks);
    out.push_back(std::move(f));
  }
  if (info_dir >= 0) ::close(info_dir);
  ::closedir(d);
}

}  // namespace

std::vector<open_file> open_files_under(const std::string& prefix) {
  std::vector<open_file> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (dirent* e = ::readdir(proc))
    if (all_digits(e->d_name)) scan_process(e->d_name, prefix, out);
  ::closedir(proc);
  return out;
}

}  // namespace shmsem::sys
