// bench/wake_latency.cpp: case 6, cross-process wake latency.
//
// Two forked processes share a semaphore of capacity 1. A holds the seat; B
// calls acquire and blocks. Once /proc shows B asleep in the kernel, A
// writes t0 (CLOCK_MONOTONIC) to shared memory and releases. B reads the
// clock (t1) as soon as its acquire returns holding the seat; t1 - t0 is one
// sample. B then releases and tells A over a pipe, and the next trial
// starts. Both processes open the semaphore themselves after the fork.
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "harness.hpp"
#include "peers.hpp"

namespace shmsem_bench {
namespace {

using benchmark::State;
using namespace std::chrono_literals;

struct WakeShared {
  std::atomic<std::int64_t> t0{0};  // written by A just before its release
  std::atomic<int> entering{0};     // trial number B is about to block in
  std::atomic<int> failed{0};
};

void BM_WakeLatency(State& state, Impl impl) {
  const int trials = config().wake_trials;
  for (auto _ : state) {
    auto sem = make_shared_semaphore(impl, 1, "wake");
    SharedArray<WakeShared> shared(1);
    SharedArray<std::int64_t> latency(static_cast<std::size_t>(trials));
    Pipe go;    // A -> B: start trial
    Pipe done;  // B -> A: trial finished, seat released

    const pid_t waiter = spawn([&] {
      auto seat = sem->join();
      for (int i = 0; i < trials; ++i) {
        if (go.receive(60s) != 'g') throw std::runtime_error("waiter: no start signal");
        shared[0].entering.store(i + 1, std::memory_order_release);
        seat->acquire();
        const std::int64_t t1 = now_ns();
        latency[static_cast<std::size_t>(i)] = t1 - shared[0].t0.load(std::memory_order_acquire);
        seat->release();
        done.send();
      }
    });
    const pid_t releaser = spawn([&] {
      auto seat = sem->join();
      for (int i = 0; i < trials; ++i) {
        seat->acquire();
        go.send('g');
        if (!spin_until([&] { return shared[0].entering.load() == i + 1; }) ||
            !wait_until_asleep(waiter)) {
          shared[0].failed.store(1);
          throw std::runtime_error("releaser: the waiter never blocked");
        }
        shared[0].t0.store(now_ns(), std::memory_order_release);
        seat->release();
        if (done.receive(60s) != '.') throw std::runtime_error("releaser: waiter did not finish");
      }
    });
    const bool releaser_ok = reap_child(releaser, 600s);
    const bool waiter_ok = reap_child(waiter, releaser_ok ? 60s : 1s);
    if (!releaser_ok || !waiter_ok) {
      state.SkipWithError("a wake-latency process failed (see stderr)");
      return;
    }
    const Percentiles p =
        percentiles(std::vector<std::int64_t>(latency.data(), latency.data() + trials));
    state.counters["median_ns"] = p.median;
    state.counters["p99_ns"] = p.p99;
    state.counters["max_ns"] = p.max;
    state.counters["trials"] = static_cast<double>(p.count);
  }
}

}  // namespace

void register_wake_latency() {
  for (Impl impl : kAllImpls) {
    register_process(std::string("BM_WakeLatency/") + impl_name(impl),
                     [impl](State& s) { BM_WakeLatency(s, impl); });
  }
}

}  // namespace shmsem_bench
