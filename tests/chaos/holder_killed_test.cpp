// holder_killed_test.cpp: a holder is SIGKILLed. Its seats are reclaimed and
// the waiters (in this process and in others) proceed, within a bounded time.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "fault_util.hpp"
#include "seat_holder.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

TEST(HolderKilled, WaiterInAnotherProcessGetsTheSeatOfAKilledHolder) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2, test::fifo());
  test::seat_holder holder(key.str(), 2, 2);
  test::pipe_channel waiting;
  test::child_process waiter([&] {
    Semaphore s = Semaphore::attach(key);
    waiting.send();
    Permit p = s.acquire(2, {.wait_timeout = 20s});
    return p.is_held() ? 0 : 1;
  });
  ASSERT_EQ(waiting.receive(), '.');
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  const auto killed = clk::now();
  holder.proc.kill(SIGKILL);
  EXPECT_EQ(waiter.wait(), 0);
  // The head waiter looks for dead holders every 20 ms; allow a wide margin.
  EXPECT_LT(clk::now() - killed, 2s);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_EQ(sem.stats().reaped, 1u);
  EXPECT_EQ(sem.stats().reclaimed_seats, 2u);
  EXPECT_TRUE(test::stats_add_up(sem));
}

TEST(HolderKilled, BlockedThreadOfThisProcessProceeds) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1, test::fifo());
  test::seat_holder holder(key.str(), 1, 1);
  bool got = false;
  std::thread waiter([&] { got = sem.acquire(1, {.wait_timeout = 20s}).is_held(); });
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  // Alive, it keeps its seat: nothing is reaped.
  EXPECT_EQ(sem.reap(), 0);
  holder.proc.kill(SIGKILL);
  waiter.join();
  EXPECT_TRUE(got);
  EXPECT_EQ(sem.used(), 0);
}

// A waiter killed at the head of the queue, with nobody queued behind it
// to hear of its death: the seats it waited for are free for the others,
// and a try does not stand behind a dead waiter.
TEST(HolderKilled, ADeadHeadWaiterDoesNotKeepFreeSeatsFromATry) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 3, test::fifo());
  test::pipe_channel go;
  test::child_process big([&] {
    Semaphore s = Semaphore::attach(key.str());
    if (go.receive(std::chrono::minutes(2)) != 'g') return 2;
    (void)s.acquire(3, {.wait_timeout = std::chrono::minutes(2)});
    return 0;
  });
  Permit mine = sem.acquire(1);
  go.send('g');
  ASSERT_TRUE(test::eventually([&] { return sem.waiters() == 1; }));
  big.kill(SIGKILL);
  std::optional<Permit> p = sem.try_acquire(1);
  EXPECT_TRUE(p.has_value()) << "a try stood behind a dead head waiter";
  EXPECT_NO_THROW((void)sem.acquire(1, {.wait_timeout = 0ms}));
  EXPECT_EQ(sem.waiters(), 0);
}

// A process exits while one of its threads is queued. The next release
// must not hand the seat to that dead waiter (where only the next reap
// would find it again): the dead waiter is reaped, and the seat stays free.
TEST(HolderKilled, ASeatIsNotHandedToAWaiterWhoseProcessExited) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1, test::fifo());
  test::pipe_channel go, queued;
  test::child_process quitter([&] {
    Semaphore s = Semaphore::attach(key.str());
    if (go.receive(std::chrono::minutes(2)) != 'g') return 2;
    std::thread waiter([&] {
      try {
        (void)s.acquire(1, {.wait_timeout = std::chrono::minutes(2)});
      } catch (const std::exception&) {
      }
    });
    waiter.detach();
    if (!test::eventually([&] { return s.waiters() == 1; })) return 3;
    queued.send('q');
    ::_exit(0);  // the queued thread goes with the process
  });
  Permit mine = sem.acquire(1);
  go.send('g');
  ASSERT_EQ(queued.receive(), 'q');
  ASSERT_EQ(quitter.wait(), 0);
  mine.release();
  EXPECT_EQ(sem.used(), 0) << "the seat went to a waiter whose process had exited";
  EXPECT_EQ(sem.waiters(), 0);
  EXPECT_TRUE(sem.try_acquire().has_value());
  EXPECT_TRUE(test::stats_add_up(sem));
}

TEST(HolderKilled, DeadHolderIsReportedDeadThenReapedByTryAcquire) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1, test::fifo());
  test::seat_holder holder(key.str(), 1, 1);
  ASSERT_EQ(sem.holders().size(), 1u);
  EXPECT_EQ(sem.holders()[0].state, HolderState::alive);
  EXPECT_EQ(sem.holders()[0].pid, holder.proc.pid());
  holder.proc.kill(SIGKILL);
  ASSERT_EQ(sem.holders().size(), 1u);
  EXPECT_EQ(sem.holders()[0].state, HolderState::dead);
  auto p = sem.try_acquire();  // reclaims before it reports full
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(sem.stats().reaped, 1u);
}

// A zombie: every thread gone, no other thread left.
bool wholly_dead(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  char state = 0;
  if (FILE* f = std::fopen((proc + "/stat").c_str(), "r")) {
    char buf[512] = {};
    std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    if (const char* rp = std::strrchr(buf, ')')) state = rp[2];
  }
  std::ifstream status(proc + "/status");
  int threads = 0;
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Threads:", 0) == 0) threads = std::stoi(line.substr(8));
  return state == 'Z' && threads == 1;
}

TEST(HolderKilled, ZombieHolderNotYetWaitedForIsDead) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1, test::fifo());
  test::seat_holder holder(key.str(), 1, 1);
  ::kill(holder.proc.pid(), SIGKILL);  // not waited for: it stays a zombie
  // The leader shows 'Z' as soon as its own thread has exited, while the
  // holder's other threads (the lifeline keeper among them) may still be on
  // their way out, their robust futexes not yet released. The process is
  // wholly dead once the leader is the only thread left.
  ASSERT_TRUE(test::eventually([&] { return wholly_dead(holder.proc.pid()); }, 30s))
      << "the child never became a zombie with no other thread";
  EXPECT_EQ(sem.reap(), 1);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_EQ(holder.proc.wait(), 128 + SIGKILL);
}

// The holder's token outlives it here, as it does while the kernel tears
// down a large process (a node server: milliseconds) before it closes its
// files: a twin made with CLONE_FILES (and nothing else shared) keeps the
// holder's descriptors open. Its every thread exiting says the holder is
// gone before its token does (attachment::exiting_alone()), unless it gave
// its token to a process tree on purpose (`share`), as `shmsem run` does.
struct holder_with_twin {
  test::pipe_channel ready, twin_release;
  std::optional<test::child_process> proc;
  pid_t twin = -1;

  holder_with_twin(const std::string& key, bool share) {
    proc.emplace([&, key, share] {
      Semaphore s = Semaphore::attach(key);
      Permit p = s.acquire();
      if (share) ::close(s.inheritable_liveness_fd());
      const long pid = ::syscall(SYS_clone, CLONE_FILES | SIGCHLD, nullptr, nullptr, nullptr, 0);
      if (pid == 0) {
        char c;
        while (::read(twin_release.read_fd(), &c, 1) < 0 && errno == EINTR) {
        }
        ::_exit(0);
      }
      ready.send_value(pid);
      for (;;) ::pause();
      return 0;
    });
    twin = static_cast<pid_t>(ready.receive_value());
  }
  ~holder_with_twin() { release_twin(); }
  void release_twin() {
    if (twin <= 0) return;
    twin_release.send();
    // Not our child (the holder's): gone from /proc, or a zombie of init's.
    test::eventually([&] { return ::kill(twin, 0) != 0 || wholly_dead(twin); }, 30s);
    twin = -1;
  }
};

TEST(HolderKilled, AHolderIsGoneWhenItsEveryThreadExitsThoughItsFilesAreStillOpen) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  holder_with_twin holder(key.str(), false);
  ASSERT_GT(holder.twin, 0);
  ::kill(holder.proc->pid(), SIGKILL);  // not waited for: a zombie, its files open in the twin
  auto p = sem.acquire(1, {.wait_timeout = 30s});
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(::kill(holder.twin, 0), 0) << "the twin, which keeps the token held, is gone";
  EXPECT_EQ(sem.stats().reaped, 1u);
  EXPECT_EQ(holder.proc->wait(), 128 + SIGKILL);
}

TEST(HolderKilled, ATokenGivenToAProcessTreeKeepsTheSeatsOfItsDeadHolder) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  holder_with_twin holder(key.str(), true);
  ASSERT_GT(holder.twin, 0);
  ::kill(holder.proc->pid(), SIGKILL);
  ASSERT_TRUE(test::eventually([&] { return wholly_dead(holder.proc->pid()); }, 30s));
  EXPECT_EQ(sem.reap(), 0);
  EXPECT_FALSE(sem.try_acquire().has_value());
  holder.release_twin();  // the tree's last descriptor goes: so does the seat
  auto p = sem.acquire(1, {.wait_timeout = 30s});
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(holder.proc->wait(), 128 + SIGKILL);
}

}  // namespace
}  // namespace shmsem
