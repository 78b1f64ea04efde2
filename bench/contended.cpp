// bench/contended.cpp: case 7, contended throughput across processes.
//
// P forked processes, each with 2 threads, loop acquire+release on one
// semaphore of capacity 1 or 4 for a fixed window. Every thread opens its own
// view of the semaphore after the fork, reports ready over a pipe, and all
// start together when the driver closes the start pipe (EOF wakes every
// reader at once). Reported: total acquisitions per second, and fairness as
// the smallest process's share divided by the largest's (1.0 = even).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
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

struct ContendShared {
  std::atomic<int> stop{0};
  std::atomic<std::int64_t> ops[kMaxProcesses]{};
};

void BM_Contended(State& state, Impl impl, int processes, int capacity) {
  if (processes > kMaxProcesses) {
    state.SkipWithError("too many processes");
    return;
  }
  for (auto _ : state) {
    auto sem = make_shared_semaphore(impl, capacity, "contended");
    SharedArray<ContendShared> shared(1);
    Pipe ready;
    Pipe start;
    std::vector<pid_t> children;
    for (int p = 0; p < processes; ++p) {
      children.push_back(spawn([&, p] {
        start.close_write();  // else the start pipe would never reach EOF
        std::atomic<std::int64_t> ops{0};
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreadsPerProcess; ++t) {
          threads.emplace_back([&] {
            auto seat = sem->join();
            ready.send();
            start.receive(120s);  // returns at EOF: the start signal
            std::int64_t n = 0;
            while (!shared[0].stop.load(std::memory_order_relaxed)) {
              seat->acquire();
              ++n;
              seat->release();
            }
            ops += n;
          });
        }
        for (auto& t : threads) t.join();
        shared[0].ops[p].store(ops.load());
      }));
    }
    const int expected = processes * kThreadsPerProcess;
    bool all_ready = true;
    for (int i = 0; i < expected && all_ready; ++i) all_ready = ready.receive(60s) == '.';
    const std::int64_t t0 = now_ns();
    start.close_write();
    if (all_ready) std::this_thread::sleep_for(config().contend_window);  // the measurement window
    shared[0].stop.store(1);
    const std::int64_t t1 = now_ns();
    bool ok = all_ready;
    for (pid_t c : children) ok = reap_child(c, 60s) && ok;
    if (!ok) {
      state.SkipWithError("a contending process failed or hung (see stderr)");
      return;
    }
    std::int64_t total = 0, lo = INT64_MAX, hi = 0;
    for (int p = 0; p < processes; ++p) {
      const std::int64_t n = shared[0].ops[p].load();
      total += n;
      lo = std::min(lo, n);
      hi = std::max(hi, n);
    }
    const double seconds = static_cast<double>(t1 - t0) / 1e9;
    state.counters["acq_per_s"] = static_cast<double>(total) / seconds;
    state.counters["fairness_min_max"] =
        hi > 0 ? static_cast<double>(lo) / static_cast<double>(hi) : 0;
    state.counters["processes"] = processes;
    state.counters["threads"] = expected;
  }
}

}  // namespace

void register_contended() {
  for (int capacity : {1, 4}) {
    for (int processes : config().contend_procs) {
      for (Impl impl : kAllImpls) {
        if (capacity > 1 && !counting(impl)) continue;
        const std::string name = "BM_Contended/procs:" + std::to_string(processes) +
                                 "/cap:" + std::to_string(capacity) + "/" + impl_name(impl);
        register_process(name, [=](State& s) { BM_Contended(s, impl, processes, capacity); });
      }
    }
  }
}

}  // namespace shmsem_bench
