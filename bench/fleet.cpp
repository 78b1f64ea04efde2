// bench/fleet.cpp: the fleet rows. shmsem is for hundreds to thousands of
// worker processes sharing a few seats, so these cases run that shape:
//
//   long-lived: N worker processes (one thread each) loop acquire, hold
//   1 ms, release, at capacity 8, for a fixed window. Reported: the grants
//   as a share of the ideal (capacity × window ÷ hold), and the worst single
//   wait of any acquire in the window. FIFO bounds that wait near N ÷
//   capacity holds; the peers make no such promise.
//
//   short-lived: N processes at once, each of which opens the semaphore,
//   acquires, holds 1 ms, releases and exits (cron jobs, CGI, a prefork
//   server recycling its children). Reported: the wall time from the first
//   fork to the last exit.
//
//   herd: N processes, forked first and then let go at once by one pipe,
//   each of which opens one existing semaphore and takes and gives back a
//   seat (a fleet restarted together, all its workers opening the key in
//   the same instant). Reported: the slowest and the median time from the
//   signal to the seat given back. The peer is a named POSIX semaphore
//   (sem_open), what such a fleet would use.
//
// Each peer runs the same loop. sem_t and SysV are shared through the
// harness's SharedSemaphore, shmsem processes open the key themselves.
#include <fcntl.h>
#include <semaphore.h>
#include <shmsem/shmsem.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
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

constexpr int kFleetCapacity = 8;
constexpr auto kHold = 1ms;
// Every row runs both policies: barging, the default (a running request
// takes a freed seat, as the peers' callers do), and fifo, chosen for its
// bounded waits, whose handoff to a sleeper leaves the seat idle while the
// sleeper wakes (docs/performance.md, "Fleets").
constexpr Impl kFleetImpls[] = {Impl::shmsem, Impl::shmsem_barging, Impl::posix_sem,
                                Impl::sysv_undo};

struct WorkerFigures {
  std::atomic<std::int64_t> grants{0};
  std::atomic<std::int64_t> worst_wait_ns{0};
};

void BM_FleetWorkers(State& state, Impl impl, int workers) {
  for (auto _ : state) {
    auto sem = make_shared_semaphore(impl, kFleetCapacity, "fleet");
    SharedArray<WorkerFigures> figures(static_cast<std::size_t>(workers));
    SharedArray<std::atomic<int>> stop(1);
    Pipe ready, start;
    std::vector<pid_t> children;
    children.reserve(static_cast<std::size_t>(workers));
    for (int w = 0; w < workers; ++w) {
      children.push_back(spawn([&, w] {
        start.close_write();  // else the start pipe would never reach EOF
        auto seat = sem->join();
        ready.send();
        start.receive(300s);  // returns at EOF: the start signal
        std::int64_t grants = 0, worst = 0;
        while (!stop[0].load(std::memory_order_relaxed)) {
          const std::int64_t asked = now_ns();
          seat->acquire();
          const std::int64_t waited = now_ns() - asked;
          // Waits that end after the window are the drain, not the run.
          if (!stop[0].load(std::memory_order_relaxed)) {
            worst = std::max(worst, waited);
            ++grants;
          }
          std::this_thread::sleep_for(kHold);  // the work the seat guards
          seat->release();
        }
        figures[static_cast<std::size_t>(w)].grants.store(grants);
        figures[static_cast<std::size_t>(w)].worst_wait_ns.store(worst);
      }));
    }
    bool all_ready = true;
    for (int i = 0; i < workers && all_ready; ++i) all_ready = ready.receive(300s) == '.';
    const std::int64_t t0 = now_ns();
    start.close_write();
    if (all_ready) std::this_thread::sleep_for(config().fleet_window);  // the measurement window
    stop[0].store(1);
    const std::int64_t t1 = now_ns();
    bool ok = all_ready;
    for (pid_t c : children) ok = reap_child(c, 300s) && ok;
    if (!ok) {
      state.SkipWithError("a worker failed or hung (see stderr)");
      return;
    }
    std::int64_t grants = 0, worst = 0;
    for (int w = 0; w < workers; ++w) {
      grants += figures[static_cast<std::size_t>(w)].grants.load();
      worst = std::max(worst, figures[static_cast<std::size_t>(w)].worst_wait_ns.load());
    }
    const double seconds = static_cast<double>(t1 - t0) / 1e9;
    const double ideal = kFleetCapacity * seconds / std::chrono::duration<double>(kHold).count();
    state.counters["grants"] = static_cast<double>(grants);
    state.counters["share_of_ideal"] = static_cast<double>(grants) / ideal;
    state.counters["worst_wait_ns"] = static_cast<double>(worst);
    state.counters["workers"] = workers;
  }
}

void BM_FleetShortLived(State& state, Impl impl, int processes) {
  for (auto _ : state) {
    auto sem = make_shared_semaphore(impl, kFleetCapacity, "fleet_short");
    const std::int64_t t0 = now_ns();
    std::vector<pid_t> children;
    children.reserve(static_cast<std::size_t>(processes));
    for (int p = 0; p < processes; ++p) {
      children.push_back(spawn([&] {
        auto seat = sem->join();
        seat->acquire();
        std::this_thread::sleep_for(kHold);
        seat->release();
      }));
    }
    bool ok = true;
    for (pid_t c : children) ok = reap_child(c, 300s) && ok;
    const std::int64_t t1 = now_ns();
    if (!ok) {
      state.SkipWithError("a process failed or hung (see stderr)");
      return;
    }
    state.counters["wall_ns"] = static_cast<double>(t1 - t0);
    state.counters["processes"] = processes;
  }
}

void BM_FleetHerdOpen(State& state, Impl impl, int processes) {
  for (auto _ : state) {
    // The semaphore exists, and this process keeps it open, before the herd
    // is let go: the herd measures opening an existing key.
    const std::string name = "/" + unique_name("herd");
    std::optional<ScopedKey> key;
    std::optional<shmsem::Semaphore> keeper;
    const bool ours = is_shmsem(impl);
    if (ours) {
      key.emplace("herd");
      keeper.emplace(shmsem::Semaphore::open(key->str(), kFleetCapacity, options_of(impl)));
    } else {
      sem_t* s = ::sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, kFleetCapacity);
      if (s == SEM_FAILED) {
        state.SkipWithError("sem_open failed");
        return;
      }
      ::sem_close(s);
    }
    SharedArray<std::atomic<std::int64_t>> took(static_cast<std::size_t>(processes));
    SharedArray<std::atomic<std::int64_t>> start_ns(1);
    Pipe ready, start;
    std::vector<pid_t> children;
    children.reserve(static_cast<std::size_t>(processes));
    for (int p = 0; p < processes; ++p) {
      children.push_back(spawn([&, p] {
        start.close_write();  // else the start pipe would never reach EOF
        ready.send();
        start.receive(300s);  // returns at EOF: the start signal
        if (ours) {
          auto sem = shmsem::Semaphore::open(key->str(), kFleetCapacity);
          sem.acquire().release();
        } else {
          sem_t* s = ::sem_open(name.c_str(), 0);
          if (s == SEM_FAILED) throw std::runtime_error("sem_open of " + name + " failed");
          while (::sem_wait(s) != 0) {
          }
          ::sem_post(s);
          ::sem_close(s);
        }
        took[static_cast<std::size_t>(p)].store(now_ns() - start_ns[0].load());
      }));
    }
    bool ok = true;
    for (int i = 0; i < processes && ok; ++i) ok = ready.receive(300s) == '.';
    start_ns[0].store(now_ns());
    start.close_write();
    for (pid_t c : children) ok = reap_child(c, 300s) && ok;
    if (!ours) ::sem_unlink(name.c_str());
    if (!ok) {
      state.SkipWithError("a process failed or hung (see stderr)");
      return;
    }
    std::vector<std::int64_t> times;
    times.reserve(static_cast<std::size_t>(processes));
    for (int p = 0; p < processes; ++p) times.push_back(took[static_cast<std::size_t>(p)].load());
    std::sort(times.begin(), times.end());
    state.counters["slowest_ns"] = static_cast<double>(times.back());
    state.counters["median_ns"] = static_cast<double>(times[times.size() / 2]);
    state.counters["processes"] = processes;
  }
}

}  // namespace

void register_fleet() {
  for (int workers : config().fleet_workers)
    for (Impl impl : kFleetImpls)
      register_process("BM_FleetWorkers/workers:" + std::to_string(workers) + "/" + impl_name(impl),
                       [=](State& s) { BM_FleetWorkers(s, impl, workers); });
  for (int processes : config().fleet_short_lived)
    for (Impl impl : kFleetImpls)
      register_process(
          "BM_FleetShortLived/procs:" + std::to_string(processes) + "/" + impl_name(impl),
          [=](State& s) { BM_FleetShortLived(s, impl, processes); });
  for (int processes : config().fleet_herd)
    for (Impl impl : {Impl::shmsem, Impl::shmsem_barging, Impl::posix_sem})
      register_process(
          "BM_FleetHerdOpen/procs:" + std::to_string(processes) + "/" + impl_name(impl),
          [=](State& s) { BM_FleetHerdOpen(s, impl, processes); });
}

}  // namespace shmsem_bench
