#include "test_support.hpp"

#include "fake/backend.hpp"
#ifdef SHMSEM_WITH_REDIS
#include "redis/connection.hpp"
#include "redis/url.hpp"
#endif
#include "redis_server.hpp"
#include "sys/clock.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace shmsem::test {
namespace {
std::atomic<int> key_counter{0};

std::string current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!info) return "none";
  std::string n = std::string(info->test_suite_name()) + "." + info->name();
  for (auto& c : n)
    if (c == '/') c = '_';
  return n;
}
}  // namespace

unique_key::unique_key(std::string_view tag) {
  key_ = "test." + std::to_string(::getpid()) + "." + std::to_string(key_counter++) + "." +
         current_test_name();
  if (!tag.empty()) key_ += "." + std::string(tag);
  if (key_.size() > 200) key_.resize(200);
  if (test_backend() != "shm") key_ = backend_url(key_);
  Semaphore::remove(key_);
}

unique_key::~unique_key() {
  try {
    Semaphore::remove(key_);
  } catch (...) {
  }
}

pipe_channel::pipe_channel() {
  if (::pipe2(fds_, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::system_category(), "pipe2");
}
pipe_channel::~pipe_channel() {
  ::close(fds_[0]);
  ::close(fds_[1]);
}

void pipe_channel::send(char c) {
  while (::write(fds_[1], &c, 1) < 0 && errno == EINTR) {
  }
}

char pipe_channel::receive(std::chrono::milliseconds timeout) {
  pollfd p{fds_[0], POLLIN, 0};
  int r;
  do r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  while (r < 0 && errno == EINTR);
  if (r <= 0) {
    ADD_FAILURE() << "pipe_channel::receive timed out after " << timeout.count() << " ms";
    return '\0';
  }
  char c = 0;
  ssize_t n;
  do n = ::read(fds_[0], &c, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1) {
    ADD_FAILURE() << "pipe_channel::receive: EOF";
    return '\0';
  }
  return c;
}

void pipe_channel::send_value(long long v) {
  const char* p = reinterpret_cast<const char*>(&v);
  size_t left = sizeof v;
  while (left > 0) {
    ssize_t n = ::write(fds_[1], p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

long long pipe_channel::receive_value(std::chrono::milliseconds timeout) {
  long long v = 0;
  char* p = reinterpret_cast<char*>(&v);
  size_t got = 0;
  while (got < sizeof v) {
    pollfd pf{fds_[0], POLLIN, 0};
    int r = ::poll(&pf, 1, static_cast<int>(timeout.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ADD_FAILURE() << "pipe_channel::receive_value timed out";
      return -1;
    }
    ssize_t n = ::read(fds_[0], p + got, sizeof v - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ADD_FAILURE() << "pipe_channel::receive_value: EOF";
      return -1;
    }
    got += static_cast<size_t>(n);
  }
  return v;
}

child_process::child_process(std::function<int()> body) {
  std::fflush(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::system_error(errno, std::system_category(), "fork");
  if (pid_ == 0) {
    int status = 99;
    try {
      status = body();
      if (::testing::Test::HasFailure()) status = 99;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: uncaught exception: %s\n", ::getpid(), e.what());
    } catch (...) {
      std::fprintf(stderr, "child %d: uncaught exception\n", ::getpid());
    }
    std::fflush(nullptr);
    ::_exit(status);
  }
}

child_process::child_process(child_process&& o) noexcept : pid_(o.pid_) {
  o.pid_ = -1;
}

child_process::~child_process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

int child_process::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int st = 0;
  for (;;) {
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "child " << pid_ << " did not exit within " << timeout.count() << " ms";
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  pid_ = -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

void child_process::kill(int sig) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  if (sig == SIGKILL) {
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
}

long pid_max() {
  long v = 32768;
  if (FILE* f = std::fopen("/proc/sys/kernel/pid_max", "r")) {
    if (std::fscanf(f, "%ld", &v) != 1) v = 32768;
    std::fclose(f);
  }
  return v;
}

namespace {

// Makes `pid` the last PID handed out in this PID namespace, so that the
// next fork gets pid + 1. Needs CAP_SYS_ADMIN; false without it.
bool set_last_pid(pid_t pid) {
  FILE* f = std::fopen("/proc/sys/kernel/ns_last_pid", "w");
  if (!f) return false;
  const bool ok = std::fprintf(f, "%d", static_cast<int>(pid)) > 0;
  return std::fclose(f) == 0 && ok;
}

// Uses up one PID, cheaply. vfork() gets a frame of its own, so that the
// caller's loop variables cannot be clobbered by it.
[[gnu::noinline]] pid_t burn_one_pid() {
  const pid_t c = ::vfork();
  if (c == 0) ::_exit(0);
  if (c > 0) {
    int st;
    ::waitpid(c, &st, 0);
  }
  return c;
}

}  // namespace

pid_t pid_impostor::fork_maybe(pid_t dead) {
  const pid_t f = ::fork();
  if (f == 0) {
    if (::getpid() == dead) {
      char b;
      while (::read(release_.read_fd(), &b, 1) < 0 && errno == EINTR) {
      }
    }
    ::_exit(0);
  }
  if (f == dead) {
    pid_ = f;
  } else if (f > 0) {
    int st;
    ::waitpid(f, &st, 0);
  }
  return f;
}

pid_impostor::pid_impostor(pid_t dead) {
  // Other tests fork at the same time (ctest -j2), so one of theirs may
  // take the PID first: ask again.
  for (int i = 0; i < 1000 && pid_ < 0 && set_last_pid(dead - 1); ++i) fork_maybe(dead);
  if (pid_ > 0 || pid_max() > 65536) return;
  const long tries = 3 * pid_max();
  for (long i = 0; i < tries && pid_ < 0; ++i) {
    const pid_t c = burn_one_pid();
    if (c < 0 || c >= dead || dead - c > 64) continue;
    // Close below `dead` (PIDs in between may be taken): real forks now,
    // each child staying alive only if it got `dead`.
    for (int j = 0; j < 128 && pid_ < 0; ++j) {
      const pid_t f = fork_maybe(dead);
      if (f < 0 || f > dead || f < c) break;  // went past it: someone else has it
    }
  }
}

pid_impostor::~pid_impostor() {
  if (pid_ <= 0) return;
  release_.send();
  int st;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && (std::string_view(ci) == "true" || std::string_view(ci) == "1");
}

bool asleep_in_futex(pid_t tid, pid_t pid) {
  const std::string task = "/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) +
                           "/task/" + std::to_string(tid);
  std::ifstream stat(task + "/stat"), syscall(task + "/syscall");
  std::string line, nr, addr, op;
  if (!std::getline(stat, line) || !(syscall >> nr >> addr >> op)) return false;
  const auto close = line.rfind(')');
  // Shared memory sleeps on shared futexes; Redis's and the fake's waiters
  // on a process-private condition variable.
  const bool shm = test_backend() == "shm";
  const unsigned long own_wait = shm ? FUTEX_WAIT_BITSET : FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG;
  if (close == std::string::npos || line.compare(close, 3, ") S") != 0) return false;
  // A queued waiter that watches other processes' lifelines sleeps on them
  // and its own word at once.
  if (shm && nr == std::to_string(SYS_futex_waitv)) return true;
  return nr == std::to_string(SYS_futex) && std::stoul(op, nullptr, 16) == own_wait;
}

bool other_threads_parked() {
  // futex_waitv: a thread of this process blocked in acquire. poll: the
  // Redis backend's keeper thread between renewals.
  static const std::array<std::string, 4> parked{
      std::to_string(SYS_futex), std::to_string(SYS_futex_waitv), std::to_string(SYS_read),
      std::to_string(SYS_poll)};
  const std::string me = std::to_string(::gettid());
  std::error_code err;
  std::filesystem::directory_iterator tasks("/proc/self/task", err);
  if (err) return false;
  for (const auto& t : tasks) {
    if (t.path().filename() == me) continue;
    std::ifstream in(t.path() / "syscall");
    std::string nr;
    if (!(in >> nr)) continue;  // gone meanwhile
    if (std::find(parked.begin(), parked.end(), nr) == parked.end()) return false;
  }
  return true;
}

std::string_view test_backend() {
  const char* b = std::getenv("SHMSEM_TEST_BACKEND");
  return b && *b ? std::string_view(b) : std::string_view("shm");
}

bool on_redis() {
  return test_backend().starts_with("redis");
}

bool on_fake() {
  return test_backend() == "fake";
}

void block_in_fake(std::string_view key, bool block) {
  detail::fake::block(key, block);
}

void occupy_in_redis(std::string_view url, bool occupy) {
#ifndef SHMSEM_WITH_REDIS
  (void)occupy;
  throw std::logic_error("occupy_in_redis(" + std::string(url) +
                         "): this build has no Redis backend");
#else
  const auto u = detail::redis::parse(url);
  auto c = detail::redis::connection::open(u.ep, sys::precise_now_ns() + 10'000'000'000);
  const std::string key = detail::redis::meta_key(u.key);
  if (occupy)
    c->run({"SET", key, "not a semaphore"}, sys::precise_now_ns() + 10'000'000'000);
  else
    c->run({"DEL", key}, sys::precise_now_ns() + 10'000'000'000);
#endif
}

std::string backend_url(std::string_view key) {
  if (test_backend() == "redis") {
    static redis_server server;
    return server.url(key);
  }
  if (test_backend() == "redis-cluster") {
    static redis_cluster cluster;
    return cluster.url(key);
  }
  if (test_backend() == "fake") return "fake://" + std::string(key);
  return {};
}

std::string token_file_of(const Semaphore& sem) {
  const int fd = sem.inheritable_liveness_fd();
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  ::close(fd);
  return path.string();
}

}  // namespace shmsem::test
