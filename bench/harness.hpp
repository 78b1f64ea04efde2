// bench/harness.hpp: what every benchmark family shares: the run
// configuration (full or smoke), the heap-allocation counter, unique keys,
// and the tools that let a benchmark drive forked processes without sleeps
// (shared mappings, pipes, "is that process blocked yet?").
#pragma once

#include <benchmark/benchmark.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace shmsem_bench {

/// How much work each family does. The full run is what `make bench` runs;
/// the smoke run (--smoke) only checks that every case works, in seconds.
struct Config {
  bool smoke = false;
  int repetitions = 3;     ///< of each hot-path case; the table shows the median
  int wake_trials = 2000;  ///< case 6
  std::vector<int> contend_procs = {2, 4, 8};  ///< case 7
  std::chrono::milliseconds contend_window{500};
  int reclaim_trials = 100;  ///< case 8
  /// How long the driver waits for a waiter to get a killed holder's seat
  /// before it declares the seat leaked.
  std::chrono::milliseconds reclaim_timeout{2000};
  std::chrono::milliseconds idle_window{2000};
  std::vector<int> held_counts = {1, 100, 10'000, 100'000};  ///< case 9
  int reap_leases = 10'000;
  int reap_trials = 5;
  std::vector<int> fleet_workers = {50, 200, 1000, 4000};  ///< long-lived fleet rows
  std::chrono::milliseconds fleet_window{5000};
  std::vector<int> fleet_short_lived = {600, 4000};  ///< short-lived fleet rows
  std::vector<int> fleet_herd = {1000, 4000};        ///< herd-open fleet rows
};

/// The configuration of this run; set once by main before registration.
const Config& config();
void set_config(const Config& c);

/// Heap allocations (every form of global operator new) made by any thread
/// of this process since it started.
std::uint64_t allocations() noexcept;

/// Counts the allocations of a timed loop and reports them per iteration as
/// the counter "allocs_per_op" (and their total as "allocs").
class AllocationMeter {
 public:
  AllocationMeter() noexcept : start_(allocations()) {}
  void report(benchmark::State& state) const;

 private:
  std::uint64_t start_;
};

/// A semaphore key no other run uses ("bench.<pid>.<tag>.<n>"). The
/// semaphore is removed when the ScopedKey dies.
class ScopedKey {
 public:
  explicit ScopedKey(std::string_view tag);
  ~ScopedKey();
  ScopedKey(const ScopedKey&) = delete;
  ScopedKey& operator=(const ScopedKey&) = delete;
  const std::string& str() const noexcept { return key_; }
  operator std::string_view() const noexcept { return key_; }

 private:
  std::string key_;
};

/// A unique name for peers' files and named objects: "bench.<pid>.<tag>.<n>".
std::string unique_name(std::string_view tag);

/// CLOCK_MONOTONIC in nanoseconds: the clock both sides of a cross-process
/// measurement read.
std::int64_t now_ns() noexcept;

/// An anonymous MAP_SHARED mapping of `count` value-initialised T's, shared
/// with every child forked afterwards. T must be trivially copyable (atomics
/// of lock-free types are fine).
template <class T>
class SharedArray {
 public:
  explicit SharedArray(std::size_t count);
  ~SharedArray();
  SharedArray(const SharedArray&) = delete;
  SharedArray& operator=(const SharedArray&) = delete;
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  T* data() noexcept { return data_; }
  std::size_t size() const noexcept { return count_; }

 private:
  T* data_;
  std::size_t count_;
};

/// Throws std::system_error for errno, saying `what` failed.
[[noreturn]] void throw_errno(const char* what);

void* map_shared(std::size_t bytes);
void unmap_shared(void* p, std::size_t bytes) noexcept;

template <class T>
SharedArray<T>::SharedArray(std::size_t count)
    : data_(static_cast<T*>(map_shared(sizeof(T) * count))), count_(count) {
  for (std::size_t i = 0; i < count; ++i) new (&data_[i]) T();
}
template <class T>
SharedArray<T>::~SharedArray() {
  unmap_shared(data_, sizeof(T) * count_);
}

/// A one-way pipe of bytes between processes (or threads).
class Pipe {
 public:
  Pipe();
  ~Pipe();
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void send(char c = '.');
  /// The next byte; '\0' on EOF or when `timeout` passes first.
  char receive(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Sends / receives a value of a trivially copyable type in full.
  void send_bytes(const void* p, std::size_t n);
  bool receive_bytes(void* p, std::size_t n, std::chrono::milliseconds timeout);
  void close_write() noexcept;
  void close_read() noexcept;

 private:
  int fds_[2];
};

/// Forks a child that runs `body` and leaves with _exit: 0, or 1 if body
/// threw (the message goes to stderr). The child never returns into the
/// benchmark harness, so no destructor of the parent's objects runs twice.
pid_t spawn(const std::function<void()>& body);

/// Waits for `pid` to end, up to `timeout`; SIGKILLs it after that. Returns
/// true when the child exited with status 0 within the timeout.
bool reap_child(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(30));

/// SIGKILLs `pid` and waits for it.
void kill_child(pid_t pid) noexcept;

/// Polls /proc until every thread of `pid` (and at least `threads` of them)
/// is asleep (state S or D), yielding the CPU between looks. This is how a
/// driver knows a waiter is really blocked in the kernel before it starts a
/// clock. Returns false after `timeout`.
bool wait_until_asleep(pid_t pid, int threads = 1,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// Spins (yielding) until `pred()` holds or `timeout` passes.
bool spin_until(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// Order statistics of a sample, in the sample's unit.
struct Percentiles {
  double median = 0;
  double p99 = 0;
  double max = 0;
  std::size_t count = 0;
};
Percentiles percentiles(std::vector<std::int64_t> sample);

/// Registers a benchmark with the settings every case shares (nanoseconds,
/// repetitions of the configuration, median-only display).
benchmark::internal::Benchmark* register_hot(const std::string& name,
                                             std::function<void(benchmark::State&)> fn);
/// Registers a case that drives processes itself and reports counters: it
/// runs exactly once.
benchmark::internal::Benchmark* register_process(const std::string& name,
                                                 std::function<void(benchmark::State&)> fn);

/// The families, in the order of the cases.
void register_uncontended();    // cases 1-5
void register_wake_latency();   // case 6
void register_contended();      // case 7, and the 100 µs hold
void register_crash_reclaim();  // case 8
void register_scaling();        // case 9
void register_fleet();          // the fleet rows
void register_redis();          // the Redis backend
void register_command_line();   // `shmsem run` beside flock(1) and GNU sem, per job
void register_node();           // the npm package beside async-sema and redis-semaphore

}  // namespace shmsem_bench
