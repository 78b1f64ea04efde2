// bench/uncontended.cpp: cases 1-5 of the benchmark, one thread and
// no contention: the hot path itself.
//   1. acquire+release of one seat (shmsem without and with a TTL)
//   2. try_acquire+release
//   3. weighted acquire(4)+release
//   4. acquire+release with an observer attached
//   5. introspection: used(), capacity(), utilization_smoothed()
// and the floor under case 1: what an uncontended acquire+release of a
// timestamped lease cannot avoid on this machine (two clock reads, three
// compare-and-swaps), measured in the same run.
// Every case counts heap allocations in its timed loop (allocs_per_op).
#include <shmsem/shmsem.hpp>

#include <dlfcn.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/sem.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

#include "harness.hpp"
#include "peers.hpp"

namespace shmsem_bench {
namespace {

using benchmark::State;
using namespace std::chrono_literals;

/// Capacity of the semaphores of the uncontended cases (flock is a lock: 1).
constexpr int kCapacity = 8;
/// TTL of the "with TTL" variant: long enough never to lapse during a run.
constexpr auto kTtl = std::chrono::milliseconds(60s);

template <class Peer>
std::unique_ptr<Peer> make_peer() {
  if constexpr (std::is_same_v<Peer, FlockSem>)
    return std::make_unique<Peer>(1);
  else
    return std::make_unique<Peer>(kCapacity);
}

// ---- 1. acquire+release -----------------------------------------------------

void BM_AcquireRelease_shmsem(State& state, std::optional<std::chrono::milliseconds> ttl,
                              bool fencing = false) {
  ScopedKey key("acquire_release");
  shmsem::Options options;
  options.fencing = fencing;
  auto sem = shmsem::Semaphore::open(key, kCapacity, options);
  shmsem::AcquireOptions opts;
  opts.ttl = ttl;
  AllocationMeter meter;
  for (auto _ : state) {
    shmsem::Permit permit = sem.acquire(1, opts);
    permit.release();
  }
  meter.report(state);
}

template <class Peer>
void BM_AcquireRelease(State& state) {
  auto sem = make_peer<Peer>();
  AllocationMeter meter;
  for (auto _ : state) {
    sem->acquire();
    sem->release();
  }
  meter.report(state);
}

// ---- 2. try_acquire+release -------------------------------------------------

void BM_TryAcquireRelease_shmsem(State& state) {
  ScopedKey key("try_acquire");
  auto sem = shmsem::Semaphore::open(key, kCapacity);
  AllocationMeter meter;
  for (auto _ : state) {
    std::optional<shmsem::Permit> permit = sem.try_acquire(1);
    if (!permit) {
      state.SkipWithError("try_acquire failed on an idle semaphore");
      break;
    }
    permit->release();
  }
  meter.report(state);
}

template <class Peer>
void BM_TryAcquireRelease(State& state) {
  auto sem = make_peer<Peer>();
  AllocationMeter meter;
  for (auto _ : state) {
    if (!sem->try_acquire()) {
      state.SkipWithError("try_acquire failed on an idle semaphore");
      break;
    }
    sem->release();
  }
  meter.report(state);
}

// ---- 3. weighted acquire(4)+release -----------------------------------------
// SysV takes 4 in one atomic semop. sem_t and boost have no weighted
// operation: 4 waits and 4 posts, which is not all-or-nothing (two waiters
// can each hold 2 and deadlock), shown for cost only.

constexpr int kWeight = 4;

void BM_Acquire4Release_shmsem(State& state) {
  ScopedKey key("acquire4");
  auto sem = shmsem::Semaphore::open(key, kCapacity);
  AllocationMeter meter;
  for (auto _ : state) {
    shmsem::Permit permit = sem.acquire(kWeight);
    permit.release();
  }
  meter.report(state);
}

void BM_Acquire4Release_sysv(State& state) {
  SysvSem sem(kCapacity);
  AllocationMeter meter;
  for (auto _ : state) {
    sem.acquire(kWeight);
    sem.release(kWeight);
  }
  meter.report(state);
}

template <class Peer>
void BM_Acquire4Release_loop(State& state) {
  auto sem = make_peer<Peer>();
  AllocationMeter meter;
  for (auto _ : state) {
    for (int i = 0; i < kWeight; ++i) sem->acquire();
    for (int i = 0; i < kWeight; ++i) sem->release();
  }
  meter.report(state);
}

// ---- 4. with an observer ----------------------------------------------------

/// An observer that does the least a real one does: count the events.
class CountingObserver final : public shmsem::Observer {
 public:
  void on_acquire(const shmsem::AcquireEvent& e) override {
    acquired_.fetch_add(1, std::memory_order_relaxed);
    benchmark::DoNotOptimize(e.permit_id);
  }
  void on_release(const shmsem::ReleaseEvent& e) override {
    released_.fetch_add(1, std::memory_order_relaxed);
    benchmark::DoNotOptimize(e.permit_id);
  }
  std::uint64_t acquired() const { return acquired_.load(); }
  std::uint64_t released() const { return released_.load(); }

 private:
  std::atomic<std::uint64_t> acquired_{0};
  std::atomic<std::uint64_t> released_{0};
};

void BM_AcquireReleaseObserved_shmsem(State& state) {
  ScopedKey key("observer");
  auto observer = std::make_shared<CountingObserver>();
  shmsem::Options options;
  options.observer = observer;
  auto sem = shmsem::Semaphore::open(key, kCapacity, options);
  AllocationMeter meter;
  for (auto _ : state) {
    shmsem::Permit permit = sem.acquire(1);
    permit.release();
  }
  meter.report(state);
  const auto ops = static_cast<std::uint64_t>(state.iterations());
  if (observer->acquired() < ops || observer->released() < ops)
    state.SkipWithError("the observer missed events");
}

// ---- 5. introspection ---------------------------------------------------------
// Measured with one seat held, so the reads see a live table.

template <class Read>
void BM_Introspect_shmsem(State& state, std::string_view tag, Read read) {
  ScopedKey key(tag);
  auto sem = shmsem::Semaphore::open(key, kCapacity);
  shmsem::Permit held = sem.acquire(1);
  AllocationMeter meter;
  for (auto _ : state) benchmark::DoNotOptimize(read(sem));
  meter.report(state);
}

void BM_Used_posix(State& state) {
  PosixSem sem(kCapacity);
  sem.acquire();
  AllocationMeter meter;
  for (auto _ : state) {
    int v = 0;
    sem_getvalue(sem.get(), &v);
    benchmark::DoNotOptimize(v);
  }
  meter.report(state);
}

void BM_Used_sysv(State& state) {
  SysvSem sem(kCapacity);
  sem.acquire();
  AllocationMeter meter;
  for (auto _ : state) benchmark::DoNotOptimize(sem.value());
  meter.report(state);
}

// ---- the floor under case 1 -------------------------------------------------
// A lease records when it was granted (acquired_at(), the holders list, TTL
// expiry) and a release records how long it was held (the hold histogram,
// the expiry check): two CLOCK_MONOTONIC_COARSE reads, through the vDSO as
// the library does. The lock-free path makes three atomic read-modify-writes
// (the gate, the slot, the gate again), each on its own cache line of a
// shared mapping. These cases do just that, nothing else.

using clock_fn = int (*)(clockid_t, timespec*);

clock_fn vdso_clock() {
  void* vdso = ::dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
  void* fn = vdso ? ::dlsym(vdso, "__vdso_clock_gettime") : nullptr;
  return fn ? reinterpret_cast<clock_fn>(fn) : &::clock_gettime;
}

struct alignas(64) Line {
  std::atomic<std::uint64_t> word{0};
};

void BM_Floor_clocks(State& state) {
  const clock_fn read = vdso_clock();
  AllocationMeter meter;
  for (auto _ : state) {
    timespec a, b;
    read(CLOCK_MONOTONIC_COARSE, &a);
    read(CLOCK_MONOTONIC_COARSE, &b);
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(b);
  }
  meter.report(state);
}

template <bool WithClocks>
void BM_Floor_rmw(State& state) {
  const clock_fn read = vdso_clock();
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    state.SkipWithError("mmap failed");
    return;
  }
  auto* lines = new (page) Line[3];
  AllocationMeter meter;
  for (auto _ : state) {
    timespec a, b;
    if constexpr (WithClocks) read(CLOCK_MONOTONIC_COARSE, &a);
    std::uint64_t g = lines[0].word.load(std::memory_order_relaxed);
    lines[0].word.compare_exchange_strong(g, g + 1, std::memory_order_acq_rel);
    std::uint64_t s = lines[1].word.load(std::memory_order_relaxed);
    if constexpr (WithClocks) read(CLOCK_MONOTONIC_COARSE, &b);
    lines[1].word.compare_exchange_strong(s, s + 1, std::memory_order_acq_rel);
    g = lines[0].word.load(std::memory_order_relaxed);
    lines[0].word.compare_exchange_strong(g, g - 1, std::memory_order_acq_rel);
    if constexpr (WithClocks) {
      benchmark::DoNotOptimize(a);
      benchmark::DoNotOptimize(b);
    }
  }
  meter.report(state);
  ::munmap(page, 4096);
}

}  // namespace

void register_uncontended() {
  register_hot("BM_Floor/clocks", BM_Floor_clocks);
  register_hot("BM_Floor/cas", BM_Floor_rmw<false>);
  register_hot("BM_Floor/clocks_and_cas", BM_Floor_rmw<true>);

  register_hot("BM_AcquireRelease/shmsem",
               [](State& s) { BM_AcquireRelease_shmsem(s, std::nullopt); });
  register_hot("BM_AcquireRelease/shmsem_ttl", [](State& s) { BM_AcquireRelease_shmsem(s, kTtl); });
  register_hot("BM_AcquireRelease/shmsem_fencing",
               [](State& s) { BM_AcquireRelease_shmsem(s, std::nullopt, true); });
  register_hot("BM_AcquireRelease/posix_sem", BM_AcquireRelease<PosixSem>);
  register_hot("BM_AcquireRelease/sysv_undo", BM_AcquireRelease<SysvSem>);
  register_hot("BM_AcquireRelease/boost_ipc", BM_AcquireRelease<BoostSem>);
  register_hot("BM_AcquireRelease/flock", BM_AcquireRelease<FlockSem>);

  register_hot("BM_TryAcquireRelease/shmsem", BM_TryAcquireRelease_shmsem);
  register_hot("BM_TryAcquireRelease/posix_sem", BM_TryAcquireRelease<PosixSem>);
  register_hot("BM_TryAcquireRelease/sysv_undo", BM_TryAcquireRelease<SysvSem>);
  register_hot("BM_TryAcquireRelease/boost_ipc", BM_TryAcquireRelease<BoostSem>);
  register_hot("BM_TryAcquireRelease/flock", BM_TryAcquireRelease<FlockSem>);

  register_hot("BM_Acquire4Release/shmsem", BM_Acquire4Release_shmsem);
  register_hot("BM_Acquire4Release/posix_sem", BM_Acquire4Release_loop<PosixSem>);
  register_hot("BM_Acquire4Release/sysv_undo", BM_Acquire4Release_sysv);
  register_hot("BM_Acquire4Release/boost_ipc", BM_Acquire4Release_loop<BoostSem>);

  register_hot("BM_AcquireReleaseObserved/shmsem", BM_AcquireReleaseObserved_shmsem);

  register_hot("BM_Used/shmsem", [](State& s) {
    BM_Introspect_shmsem(s, "used", [](const shmsem::Semaphore& sem) { return sem.used(); });
  });
  register_hot("BM_Used/posix_sem", BM_Used_posix);
  register_hot("BM_Used/sysv_undo", BM_Used_sysv);
  register_hot("BM_Capacity/shmsem", [](State& s) {
    BM_Introspect_shmsem(s, "capacity",
                         [](const shmsem::Semaphore& sem) { return sem.capacity(); });
  });
  register_hot("BM_UtilizationSmoothed/shmsem", [](State& s) {
    BM_Introspect_shmsem(s, "utilization",
                         [](const shmsem::Semaphore& sem) { return sem.utilization_smoothed(); });
  });
}

}  // namespace shmsem_bench
