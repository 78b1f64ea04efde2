// fleet_scale_test.cpp: a fleet the size shmsem is for. A thousand worker
// processes attach to one semaphore at once and take seats in turn; every
// one of them must get its seats, within a generous bound, and nothing may
// be left held. Before liveness was probed per seat holder rather than per
// attached process, this collapsed (each waiter's timer probed every
// attached process, each probe walked every process's lock).
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::child_process;
using test::pipe_channel;
using test::unique_key;

TEST(FleetScale, AThousandAttachedProcessesAllGetTheirSeats) {
  constexpr int kProcs = 1000;
  constexpr int kRounds = 3;
  constexpr int kCapacity = 8;
  unique_key k;
  auto s = Semaphore::open(k, kCapacity);
  pipe_channel attached, go, done;
  std::vector<child_process> fleet;
  fleet.reserve(kProcs);
  for (int i = 0; i < kProcs; ++i)
    fleet.emplace_back([&] {
      auto mine = Semaphore::open(k, kCapacity);
      attached.send();
      go.receive(std::chrono::minutes(5));
      for (int r = 0; r < kRounds; ++r) {
        Permit p = mine.acquire(1, {.wait_timeout = 240s});
        std::this_thread::sleep_for(1ms);  // the work the seat is for
        p.release();
      }
      done.send('+');
      return 0;
    });
  // Every process is attached before any of them starts.
  for (int i = 0; i < kProcs; ++i) ASSERT_EQ(attached.receive(std::chrono::minutes(5)), '.');
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kProcs; ++i) go.send();
  for (int i = 0; i < kProcs; ++i)
    ASSERT_EQ(done.receive(std::chrono::minutes(5)), '+') << "after " << i << " processes";
  const auto took = std::chrono::steady_clock::now() - start;
  for (auto& c : fleet) EXPECT_EQ(c.wait(60s), 0);
  EXPECT_EQ(s.used(), 0);
  EXPECT_EQ(s.waiters(), 0);
  EXPECT_EQ(s.stats().acquired, static_cast<std::uint64_t>(kProcs * kRounds));
  // The ideal is kProcs * kRounds / kCapacity ms = 0.4 s; the bound is for
  // a loaded 2-core CI machine, not a target (the benchmarks measure).
  EXPECT_LT(took, 120s);
  std::printf("fleet: %d processes x %d rounds at capacity %d took %.2f s\n", kProcs, kRounds,
              kCapacity, std::chrono::duration<double>(took).count());
}

}  // namespace
}  // namespace shmsem
