// Redis-backed semaphores across real processes on two fake hosts
// (SHMSEM_HOST): the bound under a storm of SIGKILLs, checked by a witness
// outside the library; fork. (Fencing tokens across processes:
// tests/unit/fencing_test.cpp, on both backends.)
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <shmsem/shmsem.hpp>

#include <atomic>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "redis_server.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::child_process;
using test::eventually;
using test::pipe_channel;
using test::redis_server;

std::string test_key() {
  return std::string("fleet.") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
}

// Shared by forked processes: an anonymous shared mapping.
template <class T>
T* shared_object() {
  void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
  return new (p) T();
}

TEST(RedisFleet, TwoHostsShareOneBoundAndShowTheirNames) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  auto s = Semaphore::open(url, 2);
  ASSERT_TRUE(eventually(test::other_threads_parked));  // a fork needs them idle (docs/testing.md)
  pipe_channel ready, go;
  std::vector<child_process> hosts;
  for (const char* host : {"host-a", "host-b"})
    hosts.emplace_back([&, host] {
      ::setenv("SHMSEM_HOST", host, 1);
      auto sem = Semaphore::open(url, 2);
      auto p = sem.acquire();
      ready.send();
      go.receive();
      return 0;
    });
  ready.receive();
  ready.receive();
  EXPECT_FALSE(s.try_acquire().has_value()) << "two processes on two hosts hold both seats";
  std::set<std::pair<std::string, int>> seen;
  for (const auto& h : s.holders()) {
    EXPECT_EQ(h.state, HolderState::alive);
    seen.insert({h.host, h.pid});
  }
  EXPECT_EQ(seen, (std::set<std::pair<std::string, int>>{{"host-a", hosts[0].pid()},
                                                         {"host-b", hosts[1].pid()}}));
  go.send();
  go.send();
  for (auto& h : hosts) EXPECT_EQ(h.wait(), 0);
  EXPECT_EQ(s.used(), 0);
}

// Workers in a loop: acquire, mark themselves inside, count who is inside,
// leave, release. The parent kills random workers (inside or not) and
// starts new ones. The witness is not the library: it is a table of flags
// in shared memory that only the workers write.
struct witness {
  static constexpr int kWorkers = 8;
  std::atomic<int> inside[kWorkers];
  std::atomic<int> violations{0};
  std::atomic<int> most{0};
  std::atomic<long> entries{0};
  std::atomic<bool> stop{false};
};

TEST(RedisFleet, WitnessSeesTheBoundHoldUnderAKillStorm) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  constexpr int kCapacity = 3;
  // Short enough for dead holders' seats to come back during the run; long
  // enough that a loaded machine does not starve a live holder past it.
  constexpr auto kSession = 2s;
  auto* w = shared_object<witness>();
  auto worker = [&](int i) {
    return child_process([&, i] {
      ::setenv("SHMSEM_HOST", i % 2 ? "host-b" : "host-a", 1);
      auto sem = Semaphore::open(url, kCapacity, {.session_timeout = kSession});
      std::mt19937 rng(static_cast<unsigned>(::getpid()));
      while (!w->stop.load()) {
        std::optional<Permit> p;
        try {
          p = sem.acquire(1, {.wait_timeout = 500ms});
        } catch (const AcquisitionError&) {
          continue;
        }
        w->inside[i] = 1;
        int n = 0;
        for (auto& f : w->inside) n += f.load();
        if (n > kCapacity) ++w->violations;
        int m = w->most.load();
        while (n > m && !w->most.compare_exchange_weak(m, n)) {
        }
        ++w->entries;
        std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 10000));
        w->inside[i] = 0;
        try {
          p->release();
        } catch (const PermitNotHeldError&) {
          ++w->violations;  // the seat was taken away while we worked
        }
      }
      return 0;
    });
  };
  std::vector<std::optional<child_process>> workers;
  for (int i = 0; i < witness::kWorkers; ++i) workers.emplace_back(worker(i));
  std::mt19937 rng(42);
  // A fixed number of kills, one every quarter second at most: the pause is
  // the storm's pace, not a wait for anything. The run so outlasts several
  // session timeouts, and the dead holders' seats come back during it.
  constexpr int kKills = 32;
  int inside_kills = 0;
  for (int kill = 0; kill < kKills; ++kill) {
    std::this_thread::sleep_for(250ms);
    // Half the kills aim at a worker that is inside. While every seat is a
    // dead holder's, nobody is, until a session lapses.
    int i = static_cast<int>(rng() % witness::kWorkers);
    if (rng() % 2) {
      const int from = i;
      ASSERT_TRUE(eventually(
          [&] {
            for (int k = 0; k < witness::kWorkers; ++k)
              if (w->inside[(from + k) % witness::kWorkers].load()) {
                i = (from + k) % witness::kWorkers;
                return true;
              }
            return false;
          },
          30s))
          << "no worker got a seat for 30 s: the dead holders' seats did not come back";
    }
    if (w->inside[i].load()) ++inside_kills;
    workers[i]->kill(SIGKILL);
    w->inside[i] = 0;  // a dead process does no work
    workers[i].emplace(worker(i));
  }
  w->stop = true;
  for (auto& c : workers) EXPECT_EQ(c->wait(), 0);
  RecordProperty("inside_kills", inside_kills);
  RecordProperty("entries", static_cast<int>(w->entries.load()));
  EXPECT_EQ(w->violations.load(), 0);
  EXPECT_LE(w->most.load(), kCapacity);
  EXPECT_GT(inside_kills, 0) << "no kill landed inside the critical section";
  EXPECT_GT(w->entries.load(), 100);
  auto s = Semaphore::open(url, kCapacity);
  EXPECT_TRUE(s.wait_idle(30s)) << "the dead holders' seats came back";
}

TEST(RedisFleet, AForkedChildDoesNotOwnItsParentsPermit) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  auto s = Semaphore::open(url, 2);
  auto p = s.acquire();
  // The acquire started the session's keeper thread; a fork while it still
  // allocates would copy the sanitizer allocator's lock held, and the child
  // would hang at its first allocation (docs/testing.md).
  ASSERT_TRUE(eventually(test::other_threads_parked));
  child_process child([&] {
    EXPECT_FALSE(p.is_held());
    try {
      p.release();
      ADD_FAILURE() << "the child released its parent's seat";
    } catch (const PermitNotHeldError& e) {
      EXPECT_NE(std::string(e.what()).find("belongs to the parent"), std::string::npos);
    }
    // The handle works in the child, with a session of its own.
    auto q = s.acquire();
    EXPECT_EQ(s.used(), 2);
    return 0;
  });
  EXPECT_EQ(child.wait(), 0);
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(s.used(), 1);
}

}  // namespace
}  // namespace shmsem
