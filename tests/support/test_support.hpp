// test_support.hpp: what every shmsem test needs to cross process borders
// safely: unique keys that clean up after themselves, forked children whose
// failures reach the parent, and pipes to synchronise them (never sleeps).
#pragma once

#include <shmsem/shmsem.hpp>

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace shmsem::test {

/// Options that create a semaphore with fairness `f`.
inline Options with_fairness(Fairness f) {
  Options o;
  o.fairness = f;
  return o;
}

/// Options that create a semaphore in strict FIFO order, for the tests
/// whose point is the queue's order or a handoff to the first in line: the
/// default (Fairness::barging) lets a running request pass a sleeping one.
inline Options fifo() {
  return with_fairness(Fairness::fifo);
}

/// A key no other test (or parallel ctest process) uses:
/// "test.<pid>.<counter>.<gtest name>[.<tag>]". Removed on destruction.
/// When the suite runs on Redis ($SHMSEM_TEST_BACKEND), the key is that
/// name on the suite's private server, as a URL.
class unique_key {
 public:
  explicit unique_key(std::string_view tag = "");
  ~unique_key();
  unique_key(const unique_key&) = delete;
  unique_key& operator=(const unique_key&) = delete;
  const std::string& str() const { return key_; }
  operator std::string_view() const { return key_; }
  const char* c_str() const { return key_.c_str(); }

 private:
  std::string key_;
};

/// A one-way pipe carrying single bytes between processes.
class pipe_channel {
 public:
  pipe_channel();
  ~pipe_channel();
  pipe_channel(const pipe_channel&) = delete;
  pipe_channel& operator=(const pipe_channel&) = delete;
  /// Writes one byte.
  void send(char c = '.');
  /// Reads one byte; fails the test (returns '\0') after `timeout`, or on EOF.
  char receive(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Writes an integer value in full.
  void send_value(long long v);
  long long receive_value(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  int read_fd() const { return fds_[0]; }
  int write_fd() const { return fds_[1]; }

 private:
  int fds_[2];
};

/// A forked child running `body`; its return value is the exit status. An
/// uncaught exception or a failed gtest assertion in the child exits 99.
class child_process {
 public:
  explicit child_process(std::function<int()> body);
  ~child_process();  // SIGKILLs and reaps a child still running
  child_process(child_process&& o) noexcept;
  child_process(const child_process&) = delete;
  pid_t pid() const { return pid_; }
  /// Waits for exit; returns the exit status, or 128+signal if killed.
  /// Fails the test after `timeout`.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  /// Sends sig. SIGKILL also waits for the process to be gone.
  void kill(int sig);

 private:
  pid_t pid_ = -1;
};

/// A live process of this test's own with the PID of `dead`, a process
/// that is gone: the premise of the tests of PID reuse. As root it asks the
/// kernel for that PID outright (/proc/sys/kernel/ns_last_pid, what
/// checkpoint/restore tools use); otherwise it uses up PIDs with vfork()
/// (no page tables to copy) until the next one is `dead`, up to 3 × pid_max
/// of them. The impostor only sleeps until this object goes, which reaps it.
/// pid() is -1 when another process got the PID first (ctest -j2 runs tests
/// beside this one), or pid_max is over 65,536 and the PID is not root's to ask for.
class pid_impostor {
 public:
  explicit pid_impostor(pid_t dead);
  ~pid_impostor();
  pid_impostor(const pid_impostor&) = delete;
  pid_impostor& operator=(const pid_impostor&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t fork_maybe(pid_t dead);
  pipe_channel release_;
  pid_t pid_ = -1;
};

/// /proc/sys/kernel/pid_max (32768 when unreadable).
long pid_max();

/// Polls `pred` (with a short pause between tries) until it is true or
/// `timeout` passes; returns the last value. For conditions with no event
/// to wait on, such as "the kernel has finished tearing down a process".
bool eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// True where the environment says CI=true (or CI=1).
bool in_ci();

/// In a test body or SetUp(): skips the test because this machine lacks a
/// capability it needs (root, a mount or PID namespace, a small pid_max, a
/// tool); `why` is a stream expression that says which. Where CI=true the
/// test fails instead: CI has every one of them, and a test that quietly
/// does not run there proves nothing.
#define SHMSEM_SKIP_WITHOUT_CAPABILITY(why)                                               \
  do {                                                                                    \
    if (::shmsem::test::in_ci())                                                          \
      GTEST_FAIL() << why << " (CI=true, where this test must run: it fails, not skips)"; \
    GTEST_SKIP() << why << " (a skip only outside CI: with CI=true this test fails)";     \
  } while (0)

/// True once thread `tid` of process `pid` (0: this process) sleeps in the
/// library's own wait: futex(2) with FUTEX_WAIT_BITSET, not private, or
/// futex_waitv(2) (a queued waiter watching lifelines). Other
/// sleeps do not count: std::mutex and the sanitizers' runtimes wait with
/// FUTEX_WAIT_PRIVATE, the segment lock with FUTEX_WAIT. A test polls it to
/// know that a waiter is blocked, not merely started. When the suite runs
/// on Redis, the library's own wait is a condition variable's, a private
/// FUTEX_WAIT_BITSET.
bool asleep_in_futex(pid_t tid, pid_t pid = 0);

/// True once every other thread of this process is blocked in futex(2),
/// futex_waitv(2), read(2) or poll(2) (the Redis backend's keeper): parked,
/// not allocating. A process that forks after its first
/// acquire waits for this (with eventually()): a fork while the library's
/// lifeline thread is still starting would copy the sanitizer allocator's
/// lock held, and the child would hang at its first allocation
/// (docs/testing.md, on fork).
bool other_threads_parked();

/// The path of the token file that holds this process's liveness token
/// for `sem` (its first acquire took it).
std::string token_file_of(const Semaphore& sem);

/// The backend the suite runs on: $SHMSEM_TEST_BACKEND ("redis",
/// "redis-cluster", "fake"), or "shm".
std::string_view test_backend();
/// True when the suite runs on a Redis backend ($SHMSEM_TEST_BACKEND).
bool on_redis();
/// True when the suite runs on the test build's in-process fake backend
/// (fake/backend.hpp): one process's memory, shared by no other process.
bool on_fake();

/// Puts a string where the Redis semaphore `url` would keep its main hash
/// (`occupy`), so that opening it fails as with a key of another type; or
/// deletes it again.
void occupy_in_redis(std::string_view url, bool occupy);
/// The same for a key of the fake backend: opening it fails while blocked.
void block_in_fake(std::string_view key, bool block);

/// Skips a test that checks how the shared-memory backend is built rather
/// than what a semaphore does.
#define SHMSEM_SHM_ONLY()                                                                      \
  do {                                                                                         \
    if (::shmsem::test::test_backend() != "shm") GTEST_SKIP() << "shared-memory backend only"; \
  } while (0)

/// Skips a test on the fake backend, whose semaphores live in one process:
/// a test of what other processes (forked children, tools) see of them.
#define SHMSEM_NOT_ON_FAKE()                                                                  \
  do {                                                                                        \
    if (::shmsem::test::on_fake()) GTEST_SKIP() << "needs a semaphore other processes share"; \
  } while (0)

}  // namespace shmsem::test
