// sys/proc.cpp: what /proc says about a process (see proc.hpp).

#include "sys/proc.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sys/clock.hpp"

namespace shmsem::sys {

namespace {
std::string read_small_file(const char* path) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return {};
  return std::string(buf, static_cast<size_t>(n));
}

// Field `field` (1-based, as proc(5) numbers them) of a stat line; the
// command may hold spaces and parentheses, so fields count from the last
// ')'. false if the line is short.
bool stat_field(const std::string& stat, int field, std::uint64_t& out) {
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos || field < 3) return false;
  const char* p = stat.c_str() + close + 1;
  for (int f = 3; f < field; ++f) {
    while (*p == ' ') ++p;
    if (!*p) return false;
    while (*p && *p != ' ') ++p;
  }
  while (*p == ' ') ++p;
  if (*p < '0' || *p > '9') return false;
  out = std::strtoull(p, nullptr, 10);
  return true;
}

// The thread ids in /proc/<pid>/task; false if it cannot be read.
bool task_ids(pid_t pid, std::vector<long>& out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/task", static_cast<int>(pid));
  DIR* d = ::opendir(path);
  if (!d) return false;
  out.clear();
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(std::atol(e->d_name));
  ::closedir(d);
  return !out.empty();
}

// PF_EXITING (include/linux/sched.h): set by the kernel as a thread enters
// do_exit(), before anything else of its exit; it never returns to user
// space after.
constexpr std::uint64_t kPfExiting = 0x4;
}  // namespace

std::uint64_t self_pid_ns() {
  struct ::stat st;
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return st.st_ino;
}

process_identity self_identity() {
  process_identity id;
  id.pid = ::getpid();
  id.uid = ::getuid();
  id.pid_ns = self_pid_ns();
  std::string stat = read_small_file("/proc/self/stat");
  if (!stat.empty()) {
    id.pid = static_cast<pid_t>(std::atol(stat.c_str()));
    auto close = stat.rfind(')');
    auto open = stat.find('(');
    if (open != std::string::npos && close != std::string::npos && close > open) {
      std::string comm = stat.substr(open + 1, close - open - 1);
      std::strncpy(id.comm, comm.c_str(), sizeof id.comm - 1);
      stat_field(stat, 22, id.start_time);  // starttime
    }
  }
  return id;
}

bool process_exiting(pid_t pid, std::uint64_t start_time) {
  if (pid <= 0) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  std::uint64_t started = 0;
  if (!stat_field(read_small_file(path), 22, started) || started != start_time) return false;
  // Twice: a thread that was not exiting when the first listing began may
  // have made another before it exited, and the listing need not show a
  // thread made while it runs. The second one begins after every thread of
  // the first was seen exiting, so after anything those threads made.
  std::vector<long> tids;
  for (int pass = 0; pass < 2; ++pass) {
    if (!task_ids(pid, tids)) return false;
    for (long tid : tids) {
      std::snprintf(path, sizeof path, "/proc/%d/task/%ld/stat", static_cast<int>(pid), tid);
      const std::string stat = read_small_file(path);
      std::uint64_t flags = 0;
      // A thread gone between the listing and here has exited.
      if (stat.empty()) continue;
      if (!stat_field(stat, 9, flags) || !(flags & kPfExiting)) return false;
    }
  }
  // The process we asked about, not one that took its pid meanwhile.
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const std::string again = read_small_file(path);
  return again.empty() || (stat_field(again, 22, started) && started == start_time);
}

std::string process_command(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/comm", static_cast<int>(pid));
  std::string s = read_small_file(path);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

char process_state(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const std::string s = read_small_file(path);
  // The command may hold spaces and parentheses: the state follows the last ')'.
  const std::size_t rp = s.rfind(')');
  if (rp == std::string::npos || rp + 2 >= s.size()) return 0;
  return s[rp + 2];
}

pid_t self_pid() noexcept {
  return ::getpid();
}

int random_u64(std::uint64_t& out) noexcept {
  for (;;) {
    const ssize_t r = ::getrandom(&out, sizeof out, 0);
    if (r == static_cast<ssize_t>(sizeof out)) return 0;
    if (r < 0 && errno != EINTR) return errno;
  }
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

exit_wait wait_for_exit(pid_t pid, std::int64_t deadline_ns) {
  if (pid <= 0) return exit_wait::unavailable;
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH ? exit_wait::exited : exit_wait::unavailable;
  const std::int64_t left = deadline_ns - precise_now_ns();
  const timespec ts = to_timespec(left > 0 ? left : 0);
  pollfd p{fd, POLLIN, 0};
  int r;
  do {
    r = ::ppoll(&p, 1, &ts, nullptr);
  } while (r < 0 && errno == EINTR);
  ::close(fd);
  return r > 0 ? exit_wait::exited : exit_wait::timed_out;
}

int cpus_usable() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

}  // namespace shmsem::sys
