// Fencing tokens: every grant's Permit::fencing_token() exceeds every
// earlier grant's, in one process and across processes. On shared memory
// only with Options::fencing at creation (0 otherwise); on Redis always.
// Tokens keep growing when an idle semaphore is removed and created again.
// Runs on both backends (the redis.* entries).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <shmsem/shmsem.hpp>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::child_process;
using test::eventually;
using test::unique_key;

TEST(Fencing, TokensGrowWithEveryGrantWhateverThePath) {
  unique_key k;
  auto s = Semaphore::open(k, 2, {.fencing = true});
  std::uint64_t last = 0;
  auto check = [&](const Permit& p) {
    EXPECT_GT(p.fencing_token(), last);
    EXPECT_EQ(p.fencing_token(), p.id());
    last = p.fencing_token();
  };
  for (int round = 0; round < 3; ++round) {  // later rounds would be lock-free without fencing
    auto a = s.acquire();
    check(a);
    auto b = s.try_acquire();
    ASSERT_TRUE(b.has_value());
    check(*b);
    // A grant handed to a queued waiter by a release.
    auto queued =
        std::async(std::launch::async, [&] { return s.acquire(2, {.wait_timeout = 30s}); });
    ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
    a.release();
    b->release();
    Permit c = queued.get();
    check(c);
  }
}

TEST(Fencing, SharedMemoryTokensAreZeroWithoutTheOption) {
  SHMSEM_SHM_ONLY();  // only a segment has tokens by choice; the others always do
  unique_key k;
  auto s = Semaphore::open(k, 2);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.acquire().fencing_token(), 0u);
  // The option applies when the segment is created, not to one that exists.
  auto again = Semaphore::open(k, 2, {.fencing = true});
  EXPECT_EQ(again.acquire().fencing_token(), 0u);
}

TEST(Fencing, TokensKeepGrowingWhenAnIdleSemaphoreIsRemovedAndCreatedAgain) {
  unique_key k;
  std::uint64_t last = 0;
  {
    auto s = Semaphore::open(k, 2, {.fencing = true});
    for (int i = 0; i < 3; ++i) last = s.acquire().fencing_token();
  }
  // What `shmsem gc` does to a semaphore nobody uses; a resource still
  // remembers `last`, the highest token it accepted.
  ASSERT_TRUE(Semaphore::remove_if_unused(k));
  auto again = Semaphore::open(k, 2, {.fencing = true});
  const Permit p = again.acquire();
  EXPECT_GT(p.fencing_token(), last) << "a new holder's token would be refused as stale";
  EXPECT_EQ(p.fencing_token(), p.id());
}

struct fence_witness {
  std::atomic<std::uint64_t> last{0};
  std::atomic<int> out_of_order{0};
  std::atomic<int> zero{0};
};

TEST(Fencing, TokensStrictlyIncreaseAcrossProcesses) {
  SHMSEM_NOT_ON_FAKE();
  unique_key k;
  { auto s = Semaphore::open(k, 1, {.fencing = true}); }
  void* mem = ::mmap(nullptr, sizeof(fence_witness), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* w = new (mem) fence_witness();
  std::vector<child_process> procs;
  for (int i = 0; i < 4; ++i)
    procs.emplace_back([&] {
      auto sem = Semaphore::open(k, 1);
      for (int n = 0; n < 30; ++n) {
        auto p = sem.acquire();
        const std::uint64_t t = p.fencing_token();
        if (t == 0) ++w->zero;
        // One holder at a time: its token must exceed every one before it.
        if (t <= w->last.load()) ++w->out_of_order;
        w->last = t;
      }
      return 0;
    });
  for (auto& p : procs) EXPECT_EQ(p.wait(), 0);
  EXPECT_EQ(w->out_of_order.load(), 0);
  EXPECT_EQ(w->zero.load(), 0);
  EXPECT_GE(w->last.load(), 120u);
  ::munmap(mem, sizeof(fence_witness));
}

}  // namespace
}  // namespace shmsem
