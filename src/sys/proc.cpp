// sys/proc.cpp: what /proc says about a process (see proc.hpp).

#include "sys/proc.hpp"

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
    // The command may hold spaces and parentheses: fields count from the
    // last ')'. starttime is field 22, the 20th after it.
    auto close = stat.rfind(')');
    auto open = stat.find('(');
    if (open != std::string::npos && close != std::string::npos && close > open) {
      std::string comm = stat.substr(open + 1, close - open - 1);
      std::strncpy(id.comm, comm.c_str(), sizeof id.comm - 1);
      const char* p = stat.c_str() + close + 1;
      for (int field = 3; field < 22 && *p; ++field) {
        while (*p == ' ') ++p;
        while (*p && *p != ' ') ++p;
      }
      id.start_time = std::strtoull(p, nullptr, 10);
    }
  }
  return id;
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
