// Behaviour across real processes: creation races, fork, fleet-wide
// administration, permissions, and a stress run checked by a witness.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <shmsem/shmsem.hpp>

#include <atomic>
#include <cstring>
#include <fstream>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::child_process;
using test::pipe_channel;
using test::unique_key;

TEST(Fleet, ConcurrentCreatorsAgreeOnOneSegment) {
  unique_key k;
  constexpr int kProcs = 8;
  pipe_channel go, report;
  std::vector<child_process> kids;
  for (int i = 0; i < kProcs; ++i)
    kids.emplace_back([&, i] {
      go.receive();
      auto s = Semaphore::open(k, i + 1);  // each asks for another capacity
      auto p = s.acquire();
      report.send_value(s.capacity());
      return 0;
    });
  for (int i = 0; i < kProcs; ++i) go.send();
  const long long first = report.receive_value();
  for (int i = 1; i < kProcs; ++i) EXPECT_EQ(report.receive_value(), first);
  for (auto& c : kids) EXPECT_EQ(c.wait(), 0);
  EXPECT_EQ(Semaphore::attach(k).capacity(), first);
  EXPECT_EQ(Semaphore::attach(k).used(), 0);
}

// A process that attaches while another grows the lease table (set_capacity,
// or the fast path's slot reservations) reads the file size and then the
// table's length: the length may be newer than the size, and must not be
// taken for a truncated file.
TEST(Fleet, AttachWhileTheLeaseTableGrowsIsNotTakenForTruncation) {
  unique_key k;
  { auto s = Semaphore::open(k, 1); }  // no handle kept: every attach below maps afresh
  void* page = ::mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  auto* done = new (page) std::atomic<int>(0);
  pipe_channel started;
  child_process grower([&] {
    auto g = Semaphore::attach(k);
    started.send();
    for (int cap = 2; cap <= 200'000; cap += 7) g.set_capacity(cap);
    done->store(1);
    return 0;
  });
  ASSERT_EQ(started.receive(), '.');
  int attaches = 0;
  while (done->load() == 0) {
    auto a = Semaphore::attach(k);  // SegmentError (truncated) on a misread
    ++attaches;
  }
  EXPECT_EQ(grower.wait(), 0);
  EXPECT_GT(attaches, 0);
  ::munmap(page, sizeof(std::atomic<int>));
}

TEST(Fleet, ChildDoesNotOwnItsParentsPermits) {
  unique_key k;
  auto s = Semaphore::open(k, 2);
  auto mine = s.acquire();
  // Not while the lifeline thread that the acquire started may still be
  // starting (docs/testing.md, on fork).
  ASSERT_TRUE(shmsem::test::eventually(shmsem::test::other_threads_parked));
  child_process c([&] {
    if (mine.is_held()) return 2;
    try {
      mine.release();
      return 3;
    } catch (const PermitNotHeldError&) {
    }
    auto own = s.acquire();  // the child uses the semaphore normally
    if (!own.is_held() || s.used() != 2) return 4;
    return 0;
  });
  EXPECT_EQ(c.wait(), 0);
  EXPECT_TRUE(mine.is_held());
  EXPECT_EQ(s.used(), 1) << "the child's exit freed only the child's seat";
}

TEST(Fleet, ParentDeathIsSeenWhileItsForkedChildLives) {
  unique_key k;
  pipe_channel ready, done;
  // A parent holding a seat forks a long-lived child, then dies. The child
  // inherited the parent's file descriptors; the seat must still be freed.
  child_process parent([&] {
    auto s = Semaphore::open(k, 1);
    auto p = s.acquire();
    // Not while the lifeline thread may still be starting (docs/testing.md).
    if (!shmsem::test::eventually(shmsem::test::other_threads_parked)) return 3;
    // The grandchild reports itself once fork() has returned in it, that is
    // after the fork handlers gave it its own file description.
    if (::fork() == 0) {
      ready.send_value(::getpid());
      done.receive(60s);
      ::_exit(0);
    }
    ::pause();
    return 0;
  });
  const pid_t grandchild = static_cast<pid_t>(ready.receive_value());
  parent.kill(SIGKILL);
  auto s = Semaphore::open(k, 1);
  EXPECT_TRUE(s.try_acquire().has_value());
  done.send();
  ::waitpid(grandchild, nullptr, 0);
}

TEST(Fleet, CapacityChangeAppliesFleetWide) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  child_process c([&] {
    auto other = Semaphore::open(k, 1);
    other.set_capacity(5);
    return 0;
  });
  EXPECT_EQ(c.wait(), 0);
  EXPECT_EQ(s.capacity(), 5);
  std::vector<Permit> ps;
  for (int i = 0; i < 5; ++i) ps.push_back(s.acquire(1, {.wait_timeout = 0ms}));
  s.set_capacity(100'000);  // the lease table grows in place
  for (int i = 0; i < 1000; ++i) ps.push_back(s.acquire(1, {.wait_timeout = 0ms}));
  EXPECT_EQ(s.used(), 1005);
}

TEST(Fleet, ForceReleaseFromAnotherProcessIsSeenByTheHolder) {
  unique_key k;
  auto s = Semaphore::open(k, 2);
  auto mine = s.acquire(2);
  // Not while the lifeline thread that the acquire started may still be
  // starting (docs/testing.md, on fork).
  ASSERT_TRUE(shmsem::test::eventually(shmsem::test::other_threads_parked));
  child_process admin([&] {
    auto s2 = Semaphore::attach(k);
    return s2.force_release_all() == 1 ? 0 : 1;
  });
  EXPECT_EQ(admin.wait(), 0);
  EXPECT_FALSE(mine.is_held());
  EXPECT_THROW(mine.release(), PermitNotHeldError);
}

TEST(Fleet, ReleaseWakesAWaiterInAnotherProcess) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto mine = s.acquire();
  // Not while the lifeline thread that the acquire started may still be
  // starting (docs/testing.md, on fork).
  ASSERT_TRUE(shmsem::test::eventually(shmsem::test::other_threads_parked));
  pipe_channel waiting;
  child_process c([&] {
    auto s2 = Semaphore::open(k, 1);
    waiting.send();
    auto p = s2.acquire(1, {.wait_timeout = 30s});
    return p.is_held() ? 0 : 1;
  });
  waiting.receive();
  ASSERT_TRUE(test::eventually([&] { return s.waiters() == 1; }));
  mine.release();
  EXPECT_EQ(c.wait(), 0);
}

TEST(Fleet, ModeIsAppliedWhateverTheUmask) {
  unique_key k;
  const mode_t old = ::umask(077);
  { auto s = Semaphore::open(k, 1, {.mode = 0660}); }
  ::umask(old);
  struct stat st;
  ASSERT_EQ(::stat(Semaphore::segment_path(k).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST(Fleet, ProcessWithoutAccessGetsPermissionDenied) {
  if (::geteuid() != 0) SHMSEM_SKIP_WITHOUT_CAPABILITY("needs root to switch to another user");
  unique_key k;
  { auto s = Semaphore::open(k, 1); }  // 0600, owned by root
  child_process c([&] {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 2;
    try {
      Semaphore::open(k, 1);
      return 3;
    } catch (const SegmentError& e) {
      if (e.code() != errc::permission_denied) return 4;
      if (std::string(e.what()).find(Semaphore::segment_path(k)) == std::string::npos) return 5;
    }
    return 0;
  });
  EXPECT_EQ(c.wait(), 0);
}

TEST(Fleet, NotASegmentIsRefusedWithoutBeingWritten) {
  unique_key k;
  const std::string path = Semaphore::segment_path(k);
  std::string junk(8192, '\0');
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 7 + 3);
  { std::ofstream(path, std::ios::binary) << junk; }
  ::chmod(path.c_str(), 0600);
  try {
    Semaphore::open(k, 1);
    FAIL() << "opened a file that is not a segment";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), errc::bad_segment);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::ifstream in(path, std::ios::binary);
  std::string after((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(after, junk) << "the file was written to";
}

TEST(Fleet, TruncatedOrForeignLayoutSegmentsAreRefused) {
  unique_key k;
  { auto s = Semaphore::open(k, 4); }
  const std::string path = Semaphore::segment_path(k);
  ASSERT_EQ(::truncate(path.c_str(), 8192), 0);
  try {
    Semaphore::open(k, 4);
    FAIL();
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), errc::truncated) << e.what();
  }
  Semaphore::remove(k);
  { auto s = Semaphore::open(k, 4); }
  {
    int fd = ::open(path.c_str(), O_RDWR);
    std::uint32_t other_version = 999;
    ASSERT_EQ(::pwrite(fd, &other_version, 4, 8), 4);
    ::close(fd);
  }
  try {
    Semaphore::open(k, 4);
    FAIL();
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), errc::layout_mismatch) << e.what();
    EXPECT_NE(std::string(e.what()).find("layout version"), std::string::npos) << e.what();
  }
}

TEST(Fleet, SymlinkAtTheSegmentPathIsRefused) {
  unique_key k, target("target");
  { auto t = Semaphore::open(target, 1); }
  ASSERT_EQ(::symlink(Semaphore::segment_path(target).c_str(), Semaphore::segment_path(k).c_str()),
            0);
  EXPECT_THROW(Semaphore::open(k, 1), SegmentError);
  ::unlink(Semaphore::segment_path(k).c_str());
}

TEST(Fleet, RemovedSegmentKeepsWorkingForItsUsers) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire();
  ASSERT_TRUE(Semaphore::remove(k));
  EXPECT_EQ(s.used(), 1);
  auto fresh = Semaphore::open(k, 1);  // a new semaphore under the old name
  EXPECT_EQ(fresh.used(), 0);
  p.release();
  EXPECT_EQ(s.used(), 0);
}

TEST(Fleet, RemoveIfUnusedSparesAttachedSegments) {
  unique_key k;
  {
    auto s = Semaphore::open(k, 1);
    child_process c([&] { return Semaphore::remove_if_unused(k) ? 1 : 0; });
    EXPECT_EQ(c.wait(), 0) << "removed a segment that a live process has open";
  }
  EXPECT_TRUE(Semaphore::remove_if_unused(k));
  EXPECT_FALSE(Semaphore::remove_if_unused(k));
}

// Many processes and threads with random weights and timeouts; a witness
// in a separate shared page counts seats actually held.
TEST(Fleet, StressNeverExceedsTheBoundAndLeaksNothing) {
  unique_key k;
  constexpr int kCap = 3, kProcs = 4, kThreads = 2, kRounds = 300;
  struct witness {
    std::atomic<int> held;
    std::atomic<int> max_held;
    std::atomic<int> acquired;
  };
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  auto* w = new (page) witness{};
  { auto s = Semaphore::open(k, kCap); }
  std::vector<child_process> kids;
  for (int p = 0; p < kProcs; ++p)
    kids.emplace_back([&, p] {
      auto s = Semaphore::open(k, kCap);
      std::vector<std::thread> ts;
      for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
          std::mt19937 rng(static_cast<unsigned>(p * 100 + t));
          for (int r = 0; r < kRounds; ++r) {
            const int n = 1 + static_cast<int>(rng() % 3);
            try {
              Permit permit = s.acquire(n, {.wait_timeout = std::chrono::milliseconds(rng() % 20)});
              const int now = w->held.fetch_add(n) + n;
              int m = w->max_held.load();
              while (now > m && !w->max_held.compare_exchange_weak(m, now)) {
              }
              w->acquired.fetch_add(1);
              for (int spin = static_cast<int>(rng() % 2000); spin > 0; --spin)
                std::this_thread::yield();
              w->held.fetch_sub(n);
              permit.release();
            } catch (const AcquisitionError& e) {
              if (e.reason() != Reason::timeout) std::abort();
            }
          }
        });
      for (auto& t : ts) t.join();
      return 0;
    });
  for (auto& c : kids) EXPECT_EQ(c.wait(120s), 0);
  EXPECT_LE(w->max_held.load(), kCap);
  EXPECT_GT(w->acquired.load(), 0);
  auto s = Semaphore::attach(k);
  EXPECT_EQ(s.used(), 0);
  EXPECT_EQ(s.waiters(), 0);
  auto st = s.stats();
  EXPECT_EQ(st.acquired, static_cast<std::uint64_t>(w->acquired.load()));
  EXPECT_EQ(st.acquired, st.released + st.reaped + st.expired + st.force_released);
  ::munmap(page, 4096);
}

TEST(Fleet, ShutdownAllStopsEveryHandle) {
  // Runs in a child: shutdown_all() is process-wide and permanent.
  unique_key k;
  test::child_process c([&] {
    auto a = Semaphore::open(k, 1);
    auto p = a.acquire();
    auto f = std::async(std::launch::async, [&] {
      try {
        a.acquire();
      } catch (const AcquisitionError& e) {
        return e.reason();
      }
      return Reason::error;
    });
    if (!test::eventually([&] { return a.waiters() == 1; })) return 2;
    shutdown_all();
    if (f.get() != Reason::shutdown) return 3;
    auto b = Semaphore::open(k, 1);
    try {
      b.acquire();
      return 4;
    } catch (const AcquisitionError& e) {
      if (e.reason() != Reason::shutdown) return 5;
    }
    return p.is_held() ? 0 : 6;
  });
  EXPECT_EQ(c.wait(), 0);
}

}  // namespace
}  // namespace shmsem
