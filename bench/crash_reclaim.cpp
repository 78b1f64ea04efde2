// bench/crash_reclaim.cpp: case 8, what a crash costs.
//
// Reclaim latency: a forked holder takes the only seat; a waiter process
// blocks in acquire (the driver checks /proc that it sleeps); the driver
// writes t0 to shared memory and SIGKILLs the holder (and reaps it, as a
// supervisor would). The waiter reads t1 when its acquire returns holding
// the seat. A seat that does not come back within Config::reclaim_timeout
// is reported as leaked, and the trials stop there: that is what happens to
// a sem_t or boost semaphore whose holder dies.
//
// Idle waiters: 50 threads in 5 processes block in acquire on a semaphore a
// live holder keeps full. Each process reports the CPU time and context
// switches of its waiter threads (getrusage RUSAGE_SELF minus RUSAGE_THREAD
// of the reporting thread) at the start and the end of a window; the sum is
// what the waiters burn while nothing happens.
#include <sys/resource.h>
#include <unistd.h>

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

[[noreturn]] void hold_forever(SharedSemaphore& sem, Pipe& ready) {
  auto seat = sem.join();
  seat->acquire();
  ready.send();
  for (;;) ::pause();
}

// ---- reclaim latency -------------------------------------------------------

struct ReclaimShared {
  std::atomic<std::int64_t> t0{0};
  std::atomic<int> entering{0};
};

void BM_CrashReclaim(State& state, Impl impl) {
  const int trials = config().reclaim_trials;
  for (auto _ : state) {
    auto sem = make_shared_semaphore(impl, 1, "reclaim");
    SharedArray<ReclaimShared> shared(1);
    SharedArray<std::int64_t> latency(static_cast<std::size_t>(trials));
    Pipe go;
    Pipe done;
    const pid_t waiter = spawn([&] {
      auto seat = sem->join();
      for (int i = 0; i < trials; ++i) {
        if (go.receive(600s) != 'g') return;  // 'q' or EOF: finished
        shared[0].entering.store(i + 1, std::memory_order_release);
        seat->acquire();
        latency[static_cast<std::size_t>(i)] =
            now_ns() - shared[0].t0.load(std::memory_order_acquire);
        seat->release();
        done.send();
      }
    });

    std::vector<std::int64_t> sample;
    bool leaked = false;
    std::string error;
    for (int i = 0; i < trials && error.empty(); ++i) {
      Pipe ready;
      const pid_t holder = spawn([&] { hold_forever(*sem, ready); });
      if (ready.receive(60s) != '.') {
        kill_child(holder);
        error = "the holder never got the seat";
        break;
      }
      go.send('g');
      if (!spin_until([&] { return shared[0].entering.load() == i + 1; }) ||
          !wait_until_asleep(waiter)) {
        kill_child(holder);
        error = "the waiter never blocked";
        break;
      }
      shared[0].t0.store(now_ns(), std::memory_order_release);
      kill_child(holder);  // SIGKILL, then waitpid
      if (done.receive(config().reclaim_timeout) != '.') {
        leaked = true;
        break;
      }
      sample.push_back(latency[static_cast<std::size_t>(i)]);
    }
    if (leaked || !error.empty()) {
      kill_child(waiter);
    } else {
      go.send('q');
      if (!reap_child(waiter, 60s)) error = "the waiter failed";
    }
    if (!error.empty()) {
      state.SkipWithError(error.c_str());
      return;
    }
    const Percentiles p = percentiles(sample);
    state.counters["median_ns"] = p.median;
    state.counters["p99_ns"] = p.p99;
    state.counters["max_ns"] = p.max;
    state.counters["trials"] = static_cast<double>(p.count);
    state.counters["leaked"] = leaked ? 1 : 0;
    state.counters["timeout_ms"] = static_cast<double>(config().reclaim_timeout.count());
  }
}

// ---- idle waiters ----------------------------------------------------------

constexpr int kIdleProcesses = 5;
constexpr int kIdleThreadsPerProcess = 10;

struct Usage {
  std::int64_t cpu_us = 0;
  std::int64_t switches = 0;
};

Usage usage_of(int who) {
  rusage ru{};
  ::getrusage(who, &ru);
  auto us = [](const timeval& tv) {
    return static_cast<std::int64_t>(tv.tv_sec) * 1'000'000 + tv.tv_usec;
  };
  return {us(ru.ru_utime) + us(ru.ru_stime), ru.ru_nvcsw + ru.ru_nivcsw};
}

// CPU time and context switches of every thread of this process but the
// calling one: the waiters, without the thread that answers the driver.
Usage waiters_usage() {
  const Usage self = usage_of(RUSAGE_SELF);
  const Usage me = usage_of(RUSAGE_THREAD);
  return {self.cpu_us - me.cpu_us, self.switches - me.switches};
}

void BM_IdleWaiters(State& state, Impl impl) {
  for (auto _ : state) {
    auto sem = make_shared_semaphore(impl, 1, "idle");
    SharedArray<std::atomic<int>> entering(1);
    Pipe held;
    const pid_t holder = spawn([&] { hold_forever(*sem, held); });
    if (held.receive(60s) != '.') {
      kill_child(holder);
      state.SkipWithError("the holder never got the seat");
      return;
    }

    struct WaiterProcess {
      pid_t pid = -1;
      std::unique_ptr<Pipe> ask = std::make_unique<Pipe>();     // driver -> process
      std::unique_ptr<Pipe> answer = std::make_unique<Pipe>();  // process -> driver
    };
    std::vector<WaiterProcess> procs(kIdleProcesses);
    for (auto& proc : procs) {
      proc.pid = spawn([&] {
        std::vector<std::thread> threads;
        for (int t = 0; t < kIdleThreadsPerProcess; ++t) {
          threads.emplace_back([&] {
            auto seat = sem->join();
            entering[0].fetch_add(1);
            seat->acquire();  // never returns: the holder keeps the seat
          });
        }
        // The main thread answers usage requests until told to stop; the
        // waiters are then killed with the process.
        while (proc.ask->receive(600s) == 'u') {
          const Usage u = waiters_usage();
          proc.answer->send_bytes(&u, sizeof u);
        }
        ::_exit(0);
      });
    }
    auto finish = [&] {
      for (auto& proc : procs) kill_child(proc.pid);
      kill_child(holder);
    };
    const int waiters = kIdleProcesses * kIdleThreadsPerProcess;
    bool blocked = spin_until([&] { return entering[0].load() == waiters; }, 60s);
    for (auto& proc : procs)
      blocked = blocked && wait_until_asleep(proc.pid, kIdleThreadsPerProcess + 1, 60s);
    if (!blocked) {
      finish();
      state.SkipWithError("the waiters never all blocked");
      return;
    }
    auto total_usage = [&] {
      Usage sum;
      for (auto& proc : procs) {
        Usage u;
        proc.ask->send('u');
        if (!proc.answer->receive_bytes(&u, sizeof u, 60s)) throw std::runtime_error("no usage");
        sum.cpu_us += u.cpu_us;
        sum.switches += u.switches;
      }
      return sum;
    };
    const Usage before = total_usage();
    const std::int64_t t0 = now_ns();
    std::this_thread::sleep_for(config().idle_window);  // the measurement window
    const Usage after = total_usage();
    const double seconds = static_cast<double>(now_ns() - t0) / 1e9;
    finish();
    // RUSAGE_SELF and RUSAGE_THREAD are scaled separately from the kernel's
    // exact runtime, so an idle difference can come out a microsecond below 0.
    const double cpu_us_per_s =
        std::max(0.0, static_cast<double>(after.cpu_us - before.cpu_us) / seconds);
    state.counters["cpu_pct_of_core"] = cpu_us_per_s / 1e4;
    state.counters["cpu_us_per_s"] = cpu_us_per_s;
    state.counters["switches_per_s"] =
        static_cast<double>(after.switches - before.switches) / seconds;
    state.counters["waiters"] = waiters;
  }
}

}  // namespace

void register_crash_reclaim() {
  for (Impl impl : kAllImpls) {
    register_process(std::string("BM_CrashReclaim/") + impl_name(impl),
                     [impl](State& s) { BM_CrashReclaim(s, impl); });
  }
  for (Impl impl : kAllImpls) {
    register_process(std::string("BM_IdleWaiters/") + impl_name(impl),
                     [impl](State& s) { BM_IdleWaiters(s, impl); });
  }
}

}  // namespace shmsem_bench
