// bench/harness.cpp: the shared tools of bench/harness.hpp.
#include "harness.hpp"

#include <shmsem/shmsem.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace shmsem_bench {

namespace {
Config g_config;
std::atomic<unsigned> g_name_counter{0};

std::int64_t ms_to_ns(std::chrono::milliseconds ms) {
  return static_cast<std::int64_t>(ms.count()) * 1'000'000;
}
}  // namespace

void throw_errno(const char* what) {
  throw std::system_error(errno, std::system_category(), what);
}

const Config& config() {
  return g_config;
}
void set_config(const Config& c) {
  g_config = c;
}

void AllocationMeter::report(benchmark::State& state) const {
  const double n = static_cast<double>(allocations() - start_);
  state.counters["allocs_per_op"] = benchmark::Counter(n, benchmark::Counter::kAvgIterations);
  state.counters["allocs"] = n;
}

std::string unique_name(std::string_view tag) {
  return "bench." + std::to_string(::getpid()) + "." + std::string(tag) + "." +
         std::to_string(g_name_counter.fetch_add(1));
}

ScopedKey::ScopedKey(std::string_view tag) : key_(unique_name(tag)) {
  shmsem::Semaphore::remove(key_);
}
ScopedKey::~ScopedKey() {
  try {
    shmsem::Semaphore::remove(key_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench: cannot remove %s: %s\n", key_.c_str(), e.what());
  }
}

std::int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void* map_shared(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw_errno("mmap(MAP_SHARED|MAP_ANONYMOUS)");
  return p;
}
void unmap_shared(void* p, std::size_t bytes) noexcept {
  ::munmap(p, bytes);
}

Pipe::Pipe() {
  if (::pipe2(fds_, O_CLOEXEC) != 0) throw_errno("pipe2");
}
Pipe::~Pipe() {
  close_read();
  close_write();
}
void Pipe::close_write() noexcept {
  if (fds_[1] >= 0) ::close(fds_[1]);
  fds_[1] = -1;
}
void Pipe::close_read() noexcept {
  if (fds_[0] >= 0) ::close(fds_[0]);
  fds_[0] = -1;
}
void Pipe::send(char c) {
  send_bytes(&c, 1);
}
void Pipe::send_bytes(const void* p, std::size_t n) {
  const char* b = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fds_[1], b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw_errno("write(pipe)");
    b += w;
    n -= static_cast<std::size_t>(w);
  }
}
bool Pipe::receive_bytes(void* p, std::size_t n, std::chrono::milliseconds timeout) {
  char* b = static_cast<char*>(p);
  const std::int64_t deadline = now_ns() + ms_to_ns(timeout);
  while (n > 0) {
    const std::int64_t left_ms = (deadline - now_ns()) / 1'000'000;
    if (left_ms < 0) return false;
    pollfd pfd{fds_[0], POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(left_ms) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno("poll(pipe)");
    if (r == 0) continue;
    ssize_t got = ::read(fds_[0], b, n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw_errno("read(pipe)");
    if (got == 0) return false;  // EOF
    b += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}
char Pipe::receive(std::chrono::milliseconds timeout) {
  char c = '\0';
  return receive_bytes(&c, 1, timeout) ? c : '\0';
}

pid_t spawn(const std::function<void()>& body) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid > 0) return pid;
  int rc = 0;
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench child %d: %s\n", static_cast<int>(::getpid()), e.what());
    rc = 1;
  } catch (...) {
    rc = 1;
  }
  std::fflush(nullptr);
  ::_exit(rc);
}

bool reap_child(pid_t pid, std::chrono::milliseconds timeout) {
  const std::int64_t deadline = now_ns() + ms_to_ns(timeout);
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (r < 0 && errno != EINTR) return false;
    if (now_ns() > deadline) {
      kill_child(pid);
      return false;
    }
    // A child that has not finished yet: look again in a millisecond. This
    // wait is the end of a case, never part of a measurement.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void kill_child(pid_t pid) noexcept {
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

namespace {
// State letter of /proc/<pid>/task/<tid>/stat (after the last ')', the
// command name may contain anything); '\0' if it cannot be read.
char task_state(const std::string& stat_path) {
  char buf[512];
  int fd = ::open(stat_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return '\0';
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return '\0';
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');
  if (!paren || paren[1] != ' ') return '\0';
  return paren[2];
}

// True when every thread of pid sleeps and there are at least `threads`.
bool all_asleep(pid_t pid, int threads) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return false;
  int asleep = 0;
  bool all = true;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char s = task_state(dir + "/" + e->d_name + "/stat");
    if (s == 'S' || s == 'D')
      ++asleep;
    else
      all = false;
  }
  ::closedir(d);
  return all && asleep >= threads;
}
}  // namespace

bool wait_until_asleep(pid_t pid, int threads, std::chrono::milliseconds timeout) {
  return spin_until([&] { return all_asleep(pid, threads); }, timeout);
}

bool spin_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const std::int64_t deadline = now_ns() + ms_to_ns(timeout);
  while (!pred()) {
    if (now_ns() > deadline) return false;
    ::sched_yield();
  }
  return true;
}

Percentiles percentiles(std::vector<std::int64_t> sample) {
  Percentiles p;
  p.count = sample.size();
  if (sample.empty()) return p;
  std::sort(sample.begin(), sample.end());
  auto at = [&](double q) {
    // Nearest-rank: the smallest value with at least q of the sample at or below it.
    std::size_t rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sample.size())));
    return static_cast<double>(sample[std::clamp<std::size_t>(rank, 1, sample.size()) - 1]);
  };
  p.median = at(0.5);
  p.p99 = at(0.99);
  p.max = static_cast<double>(sample.back());
  return p;
}

benchmark::internal::Benchmark* register_hot(const std::string& name,
                                             std::function<void(benchmark::State&)> fn) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [fn](benchmark::State& s) { fn(s); });
  b->Unit(benchmark::kNanosecond);
  if (config().repetitions > 1) {
    b->Repetitions(config().repetitions)->DisplayAggregatesOnly(true);
  }
  return b;
}

benchmark::internal::Benchmark* register_process(const std::string& name,
                                                 std::function<void(benchmark::State&)> fn) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [fn](benchmark::State& s) { fn(s); });
  b->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(1)->UseRealTime();
  return b;
}

}  // namespace shmsem_bench
