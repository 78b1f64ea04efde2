// bench/contended.cpp: case 7, contended throughput across processes, and
// the rows where each seat is held for 100 µs.
//
// Case 7: P forked processes, each with 2 threads, loop acquire+release on
// one semaphore of capacity 1 or 4 for a fixed window. Every thread opens its
// own view of the semaphore after the fork, reports ready over a pipe, and
// all start together when the driver closes the start pipe (EOF wakes every
// reader at once). Reported: total acquisitions per second, fairness as the
// smallest process's share divided by the largest's (1.0 = even), the same
// counted from the first tenth of the window on (fairness_after_start: the
// threads start together, and under fifo whoever runs before the queue has
// formed takes seats on the fast path until its block of permit ids runs
// out, an offset that strict order then keeps to the end), and the longest
// wait of any thread (max_wait_us, see timed_cycles).
//
// The 100 µs hold: 8 processes × 2 threads share 4 seats and hold each one
// for 100 µs, asleep, as a seat that guards IO would be held; on 2 cores a
// busy hold would measure the CPU instead of the semaphore. A policy's cost
// here is not the call's time but the seat-time it wastes: a FIFO handoff
// leaves the seat free while its waiter wakes up, which barging avoids by
// letting a running thread take it. Reported as case 7, plus the seats'
// idle share (see sample_idle_share).
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "peers.hpp"

namespace shmsem_bench {
namespace {

using benchmark::State;
using namespace std::chrono_literals;

constexpr int kThreadsPerProcess = 2;
constexpr int kMaxProcesses = 64;

/// Barging changes only who gets a contended seat, so it runs here and in
/// no other case.
constexpr Impl kContendedImpls[] = {Impl::shmsem,    Impl::shmsem_barging, Impl::posix_sem,
                                    Impl::sysv_undo, Impl::boost_ipc,      Impl::flock};
/// The counting peers: flock holds one seat only, and on Linux boost's
/// semaphore is a sem_t underneath (the posix_sem row again).
constexpr Impl kHoldImpls[] = {Impl::shmsem, Impl::shmsem_barging, Impl::posix_sem,
                               Impl::sysv_undo};
constexpr int kHoldProcesses = 8;
constexpr int kHoldCapacity = 4;
constexpr auto kHold = 100us;
/// How often the driver looks at the seats during a hold row.
constexpr auto kSamplePeriod = 20us;

// Written by the contenders, read by the driver. The hold counts change on
// every grant, so each has a cache line of its own and does not evict the
// stop flag that every loop reads.
struct ContendShared {
  alignas(64) std::atomic<int> stop{0};
  std::atomic<std::int64_t> grants[kMaxProcesses]{};
  std::atomic<std::int64_t> grants_after_start[kMaxProcesses]{};
  std::atomic<std::int64_t> longest_gap_ns[kMaxProcesses]{};
  alignas(64) std::atomic<int> wanting{0};  // threads between "about to acquire" and its return
  alignas(64) std::atomic<int> holding{0};  // threads between acquire's return and release
};

/// One thread's figures for the window.
struct Tally {
  std::int64_t grants = 0;
  std::int64_t grants_after_start = 0;  ///< those after the first tenth of the window
  std::int64_t longest_gap_ns = 0;
};

/// Runs `cycle` (one acquire ... release) until the driver stops the window.
/// The wait of every acquire is bounded by one clock read per cycle, taken
/// after the release: the gap between two consecutive reads of one thread
/// holds exactly one acquire, its wait included, plus the hold (if any)
/// and one release. Timing the acquire alone would take two reads per cycle; and at
/// capacity 1 a read inside the seat would lengthen the critical section
/// that case 7 measures. Every implementation pays the same vDSO call.
template <class Cycle>
Tally timed_cycles(ContendShared& shared, Cycle cycle) {
  Tally tally;
  std::int64_t last = now_ns();
  const std::int64_t started =
      last + std::chrono::nanoseconds(config().contend_window).count() / 10;
  for (;;) {
    cycle();
    const std::int64_t released = now_ns();
    // A grant that ends after the window is the drain, not the run.
    if (shared.stop.load(std::memory_order_relaxed)) break;
    tally.longest_gap_ns = std::max(tally.longest_gap_ns, released - last);
    last = released;
    ++tally.grants;
    if (released >= started) ++tally.grants_after_start;
  }
  return tally;
}

/// The default timer slack (50 µs) would stretch a 100 µs hold and a 20 µs
/// sampling period by half or more. It is per thread.
void tighten_timer_slack() noexcept {
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

void sleep_for(std::chrono::nanoseconds d) noexcept {
  const timespec ts{static_cast<time_t>(d.count() / 1'000'000'000),
                    static_cast<long>(d.count() % 1'000'000'000)};
  ::clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
}

/// The share of seat-time in which a seat was free while a request waited:
/// every kSamplePeriod until `window` ends, min(capacity − holding, wanting)
/// seats are idle, summed and divided by capacity × samples. Sampled, so
/// approximate: the two counts are read one after the other, each thread
/// updates them a moment before or after its call, and the driver competes
/// for the same cores. Holding drops before release, so the release call
/// itself counts as idle when someone waits: it is part of the handoff.
double sample_idle_share(ContendShared& shared, int capacity, std::chrono::milliseconds window,
                         std::int64_t& samples) {
  const int old_slack = ::prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
  tighten_timer_slack();
  const std::int64_t end = now_ns() + std::chrono::nanoseconds(window).count();
  std::int64_t idle_seats = 0;
  samples = 0;
  while (now_ns() < end) {
    sleep_for(kSamplePeriod);
    const int free_seats = std::max(0, capacity - shared.holding.load(std::memory_order_relaxed));
    idle_seats += std::min(free_seats, shared.wanting.load(std::memory_order_relaxed));
    ++samples;
  }
  if (old_slack > 0) ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(old_slack), 0, 0, 0);
  return samples > 0 ? static_cast<double>(idle_seats) / (static_cast<double>(capacity) * samples)
                     : 0;
}

/// What one window of contention measured.
struct Outcome {
  double seconds = 0;
  std::int64_t grants = 0;
  double fairness = 0;              ///< the smallest process's grants ÷ the largest's
  double fairness_after_start = 0;  ///< the same, from the first tenth of the window on
  std::int64_t longest_gap_ns = 0;
};

/// The smallest and largest per-process grant counts seen.
struct Spread {
  std::int64_t lo = INT64_MAX;
  std::int64_t hi = 0;
  void add(std::int64_t n) {
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  double ratio() const { return hi > 0 ? static_cast<double>(lo) / static_cast<double>(hi) : 0; }
};

/// Forks `processes` × kThreadsPerProcess contenders on one semaphore, each
/// running `loop` with its own view of it, starts them together and lets
/// them run while `window` runs in the driver. nullopt (the case marked
/// failed) when a process failed or hung.
std::optional<Outcome> contend(State& state, Impl impl, int processes, int capacity,
                               const char* tag,
                               const std::function<Tally(Contender&, ContendShared&)>& loop,
                               const std::function<void(ContendShared&)>& window) {
  auto sem = make_shared_semaphore(impl, capacity, tag);
  SharedArray<ContendShared> shared(1);
  Pipe ready;
  Pipe start;
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    children.push_back(spawn([&, p] {
      start.close_write();  // else the start pipe would never reach EOF
      std::vector<Tally> tallies(kThreadsPerProcess);
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreadsPerProcess; ++t) {
        threads.emplace_back([&, t] {
          auto seat = sem->join();
          ready.send();
          start.receive(120s);  // returns at EOF: the start signal
          tallies[static_cast<std::size_t>(t)] = loop(*seat, shared[0]);
        });
      }
      for (auto& t : threads) t.join();
      std::int64_t grants = 0, after_start = 0, longest = 0;
      for (const Tally& t : tallies) {
        grants += t.grants;
        after_start += t.grants_after_start;
        longest = std::max(longest, t.longest_gap_ns);
      }
      shared[0].grants[p].store(grants);
      shared[0].grants_after_start[p].store(after_start);
      shared[0].longest_gap_ns[p].store(longest);
    }));
  }
  const int expected = processes * kThreadsPerProcess;
  bool all_ready = true;
  for (int i = 0; i < expected && all_ready; ++i) all_ready = ready.receive(60s) == '.';
  const std::int64_t t0 = now_ns();
  start.close_write();
  if (all_ready) window(shared[0]);
  shared[0].stop.store(1);
  const std::int64_t t1 = now_ns();
  bool ok = all_ready;
  for (pid_t c : children) ok = reap_child(c, 60s) && ok;
  if (!ok) {
    state.SkipWithError("a contending process failed or hung (see stderr)");
    return std::nullopt;
  }
  Outcome out;
  Spread all, after_start;
  for (int p = 0; p < processes; ++p) {
    const std::int64_t n = shared[0].grants[p].load();
    out.grants += n;
    all.add(n);
    after_start.add(shared[0].grants_after_start[p].load());
    out.longest_gap_ns = std::max(out.longest_gap_ns, shared[0].longest_gap_ns[p].load());
  }
  out.seconds = static_cast<double>(t1 - t0) / 1e9;
  out.fairness = all.ratio();
  out.fairness_after_start = after_start.ratio();
  return out;
}

void put_counters(State& state, const Outcome& out, int processes) {
  state.counters["acq_per_s"] = static_cast<double>(out.grants) / out.seconds;
  state.counters["fairness_min_max"] = out.fairness;
  state.counters["fairness_after_start"] = out.fairness_after_start;
  state.counters["max_wait_us"] = static_cast<double>(out.longest_gap_ns) / 1e3;
  state.counters["processes"] = processes;
  state.counters["threads"] = processes * kThreadsPerProcess;
}

void BM_Contended(State& state, Impl impl, int processes, int capacity) {
  if (processes > kMaxProcesses) {
    state.SkipWithError("too many processes");
    return;
  }
  auto acquire_release = [](Contender& seat, ContendShared& shared) {
    return timed_cycles(shared, [&] {
      seat.acquire();
      seat.release();
    });
  };
  for (auto _ : state) {
    auto out =
        contend(state, impl, processes, capacity, "contended", acquire_release,
                [](ContendShared&) { std::this_thread::sleep_for(config().contend_window); });
    if (!out) return;
    put_counters(state, *out, processes);
  }
}

void BM_ContendedHold(State& state, Impl impl) {
  auto acquire_hold_release = [](Contender& seat, ContendShared& shared) {
    tighten_timer_slack();
    return timed_cycles(shared, [&] {
      shared.wanting.fetch_add(1, std::memory_order_relaxed);
      seat.acquire();
      shared.holding.fetch_add(1, std::memory_order_relaxed);
      shared.wanting.fetch_sub(1, std::memory_order_relaxed);
      sleep_for(kHold);  // the IO the seat guards
      shared.holding.fetch_sub(1, std::memory_order_relaxed);
      seat.release();
    });
  };
  for (auto _ : state) {
    double idle_share = 0;
    std::int64_t samples = 0;
    auto out = contend(state, impl, kHoldProcesses, kHoldCapacity, "hold", acquire_hold_release,
                       [&](ContendShared& shared) {
                         idle_share = sample_idle_share(shared, kHoldCapacity,
                                                        config().contend_window, samples);
                       });
    if (!out) return;
    put_counters(state, *out, kHoldProcesses);
    state.counters["idle_share"] = idle_share;
    state.counters["idle_samples"] = static_cast<double>(samples);
    state.counters["capacity"] = kHoldCapacity;
    state.counters["hold_us"] = std::chrono::duration<double, std::micro>(kHold).count();
  }
}

}  // namespace

void register_contended() {
  for (int capacity : {1, 4}) {
    for (int processes : config().contend_procs) {
      for (Impl impl : kContendedImpls) {
        if (capacity > 1 && !counting(impl)) continue;
        const std::string name = "BM_Contended/procs:" + std::to_string(processes) +
                                 "/cap:" + std::to_string(capacity) + "/" + impl_name(impl);
        register_process(name, [=](State& s) { BM_Contended(s, impl, processes, capacity); });
      }
    }
  }
  for (Impl impl : kHoldImpls) {
    const std::string name = "BM_ContendedHold/procs:" + std::to_string(kHoldProcesses) +
                             "/cap:" + std::to_string(kHoldCapacity) +
                             "/hold_us:" + std::to_string(kHold.count()) + "/" + impl_name(impl);
    register_process(name, [=](State& s) { BM_ContendedHold(s, impl); });
  }
}

}  // namespace shmsem_bench
