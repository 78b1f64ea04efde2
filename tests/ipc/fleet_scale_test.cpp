// fleet_scale_test.cpp: a fleet the size shmsem is for. A thousand worker
// processes attach to one semaphore at once and take seats in turn; every
// one of them must get its seats, within a generous bound, and nothing may
// be left held. Before liveness was probed per seat holder rather than per
// attached process, this collapsed (each waiter's timer probed every
// attached process, each probe walked every process's lock).
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
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

// A fleet restarted at once: every worker opens the same existing key in
// the same instant, with the default options, on a host whose CPUs are
// busy with other work. Each open must succeed: before openers of a live
// segment stopped queueing on its init lock one at a time, some timed out.
TEST(FleetScale, FourThousandProcessesOpenOneKeyAtOnceOnABusyHost) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kProcs = 1000;  // forking an instrumented process is slow
#else
  constexpr int kProcs = 4000;
#endif
  constexpr int kCapacity = 8;
  unique_key k;
  auto s = Semaphore::open(k, kCapacity);
  // The busy host: a CPU hog per core, running until the herd is done.
  int stop_hogs[2];
  ASSERT_EQ(::pipe(stop_hogs), 0);
  std::vector<child_process> hogs;
  for (int i = 0; i < 2; ++i)
    hogs.emplace_back([&] {
      ::close(stop_hogs[1]);
      ::fcntl(stop_hogs[0], F_SETFL, O_NONBLOCK);
      char c;
      for (volatile std::uint64_t spin = 0; ::read(stop_hogs[0], &c, 1) < 0; ++spin) {
        for (int j = 0; j < 100000; ++j) spin = spin + 1;
      }
      return 0;
    });
  // One pipe lets the whole herd go at once: each child blocks on its read
  // end until the last write end closes.
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  pipe_channel ready;
  std::vector<child_process> herd;
  herd.reserve(kProcs);
  for (int i = 0; i < kProcs; ++i)
    herd.emplace_back([&] {
      ::close(go[1]);
      ready.send();
      char c;
      if (::read(go[0], &c, 1) != 0) return 2;
      try {
        auto mine = Semaphore::open(k.str(), kCapacity);
        mine.acquire(1, {.wait_timeout = 240s}).release();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "herd: %s\n", e.what());
        return 3;
      }
      return 0;
    });
  for (int i = 0; i < kProcs; ++i) ASSERT_EQ(ready.receive(std::chrono::minutes(5)), '.');
  ::close(go[0]);
  const auto start = std::chrono::steady_clock::now();
  ::close(go[1]);
  int failed = 0;
  for (auto& c : herd) failed += c.wait(std::chrono::minutes(5)) != 0;
  const auto took = std::chrono::steady_clock::now() - start;
  ::close(stop_hogs[1]);
  for (auto& h : hogs) EXPECT_EQ(h.wait(), 0);
  ::close(stop_hogs[0]);
  EXPECT_EQ(failed, 0) << "of " << kProcs << " processes that opened the key at once";
  EXPECT_EQ(s.used(), 0);
  EXPECT_EQ(s.waiters(), 0);
  EXPECT_EQ(s.stats().acquired, static_cast<std::uint64_t>(kProcs));
  std::printf("herd: %d processes opened one key at once beside 2 CPU hogs in %.2f s\n", kProcs,
              std::chrono::duration<double>(took).count());
}

}  // namespace
}  // namespace shmsem
