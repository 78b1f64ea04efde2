// bench/scaling.cpp: case 9, how costs grow with the size of the table.
//   - acquire+release with 1, 100, 10,000 and 100,000 seats already held
//     (capacity = held + 1, the held seats are single-seat leases of this
//     process): a linear scan on the hot path shows up here;
//   - open() of an existing semaphore (and the peers' equivalents);
//   - reap() of 10,000 leases whose holder process was SIGKILLed.
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <semaphore.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <unistd.h>

#include <boost/interprocess/sync/named_semaphore.hpp>
#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "harness.hpp"
#include "peers.hpp"

namespace shmsem_bench {
namespace {

using benchmark::State;
using namespace std::chrono_literals;

// ---- acquire+release with seats held -------------------------------------------

void BM_AcquireReleaseHeld_shmsem(State& state, int held_count) {
  ScopedKey key("held");
  auto sem = shmsem::Semaphore::open(key, held_count + 1);
  std::vector<shmsem::Permit> held;
  held.reserve(static_cast<std::size_t>(held_count));
  for (int i = 0; i < held_count; ++i) held.push_back(sem.acquire(1));
  AllocationMeter meter;
  for (auto _ : state) {
    shmsem::Permit permit = sem.acquire(1);
    permit.release();
  }
  meter.report(state);
  state.counters["held"] = held_count;
}

void BM_AcquireReleaseHeld_posix(State& state, int held_count) {
  PosixSem sem(held_count + 1);
  for (int i = 0; i < held_count; ++i) sem.acquire();
  AllocationMeter meter;
  for (auto _ : state) {
    sem.acquire();
    sem.release();
  }
  meter.report(state);
  state.counters["held"] = held_count;
}

// ---- open() of an existing semaphore ---------------------------------------------

constexpr int kOpenCapacity = 8;

void BM_OpenExisting_shmsem(State& state) {
  ScopedKey key("open");
  auto keeper = shmsem::Semaphore::open(key, kOpenCapacity);
  AllocationMeter meter;
  for (auto _ : state) {
    auto sem = shmsem::Semaphore::open(key, kOpenCapacity);
    benchmark::DoNotOptimize(&sem);
  }
  meter.report(state);
}

void BM_OpenExisting_posix(State& state) {
  // append, not "/" + ...: GCC 12 inlines that operator+ into a false -Wrestrict warning.
  const std::string name = std::string("/").append(unique_name("open"));
  sem_t* keeper = ::sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, kOpenCapacity);
  if (keeper == SEM_FAILED) {
    state.SkipWithError("sem_open(O_CREAT) failed");
    return;
  }
  AllocationMeter meter;
  for (auto _ : state) {
    sem_t* s = ::sem_open(name.c_str(), 0);
    benchmark::DoNotOptimize(s);
    ::sem_close(s);
  }
  meter.report(state);
  ::sem_close(keeper);
  ::sem_unlink(name.c_str());
}

void BM_OpenExisting_sysv(State& state) {
  // A key of our own; on the rare clash with another IPC object, try the next.
  key_t key = static_cast<key_t>(0x5e000000 ^ (::getpid() << 4));
  int id = -1;
  for (int i = 0; i < 64 && id < 0; ++i, ++key) id = ::semget(key, 1, IPC_CREAT | IPC_EXCL | 0600);
  --key;
  if (id < 0) {
    state.SkipWithError("semget(IPC_CREAT) failed");
    return;
  }
  AllocationMeter meter;
  for (auto _ : state) benchmark::DoNotOptimize(::semget(key, 1, 0));
  meter.report(state);
  ::semctl(id, 0, IPC_RMID);
}

void BM_OpenExisting_boost(State& state) {
  namespace bi = boost::interprocess;
  const std::string name = unique_name("open");
  {
    bi::named_semaphore keeper(bi::create_only, name.c_str(), kOpenCapacity);
    AllocationMeter meter;
    for (auto _ : state) {
      bi::named_semaphore sem(bi::open_only, name.c_str());
      benchmark::DoNotOptimize(&sem);
    }
    meter.report(state);
  }
  bi::named_semaphore::remove(name.c_str());
}

void BM_OpenExisting_flock(State& state) {
  FlockSem keeper(1);
  AllocationMeter meter;
  for (auto _ : state) {
    int fd = ::open(keeper.path().c_str(), O_RDWR | O_CLOEXEC);
    benchmark::DoNotOptimize(fd);
    ::close(fd);
  }
  meter.report(state);
}

// ---- reap() of a dead holder's leases ---------------------------------------------

void BM_ReapDeadHolder(State& state, int leases) {
  for (auto _ : state) {
    std::vector<std::int64_t> sample;
    for (int trial = 0; trial < config().reap_trials; ++trial) {
      ScopedKey key("reap");
      Pipe ready;
      const pid_t holder = spawn([&] {
        auto sem = shmsem::Semaphore::open(key, leases);
        std::vector<shmsem::Permit> permits;
        permits.reserve(static_cast<std::size_t>(leases));
        for (int i = 0; i < leases; ++i) permits.push_back(sem.acquire(1));
        ready.send();
        for (;;) ::pause();
      });
      if (ready.receive(120s) != '.') {
        kill_child(holder);
        state.SkipWithError("the holder did not take its leases");
        return;
      }
      // Attach while the holder lives, so that nothing but reap() can
      // mistake the segment for an abandoned one.
      auto sem = shmsem::Semaphore::open(key, leases);
      kill_child(holder);
      const std::int64_t t0 = now_ns();
      const int freed = sem.reap();
      const std::int64_t t1 = now_ns();
      if (freed != leases) {
        const std::string msg = "reap() freed " + std::to_string(freed) + " of " +
                                std::to_string(leases) + " seats of a dead holder";
        state.SkipWithError(msg.c_str());
        return;
      }
      sample.push_back(t1 - t0);
    }
    const Percentiles p = percentiles(sample);
    state.counters["median_ns"] = p.median;
    state.counters["max_ns"] = p.max;
    state.counters["trials"] = static_cast<double>(p.count);
    state.counters["leases"] = leases;
  }
}

}  // namespace

void register_scaling() {
  for (int held : config().held_counts) {
    const std::string suffix = "held:" + std::to_string(held);
    register_hot("BM_AcquireReleaseHeld/" + suffix + "/shmsem",
                 [held](State& s) { BM_AcquireReleaseHeld_shmsem(s, held); });
    register_hot("BM_AcquireReleaseHeld/" + suffix + "/posix_sem",
                 [held](State& s) { BM_AcquireReleaseHeld_posix(s, held); });
  }
  register_hot("BM_OpenExisting/shmsem", BM_OpenExisting_shmsem);
  register_hot("BM_OpenExisting/posix_sem", BM_OpenExisting_posix);
  register_hot("BM_OpenExisting/sysv_undo", BM_OpenExisting_sysv);
  register_hot("BM_OpenExisting/boost_ipc", BM_OpenExisting_boost);
  register_hot("BM_OpenExisting/flock", BM_OpenExisting_flock);

  const int leases = config().reap_leases;
  register_process("BM_ReapDeadHolder/leases:" + std::to_string(leases) + "/shmsem",
                   [leases](State& s) { BM_ReapDeadHolder(s, leases); });
}

}  // namespace shmsem_bench
