// bench/main.cpp: shmsem-bench, shmsem against its peers in one run.
//
//   shmsem-bench [--smoke] [--table_out=FILE] [Google Benchmark flags]
//   SHMSEM_BENCH_REVISION=<git describe>   named in the report if set (run.sh sets it)
//
// Runs every benchmark case (see the family files), prints
// Google Benchmark's console output, then the markdown ratio table with the
// targets checked, and writes the table to FILE if asked. Pass
// --benchmark_out=FILE --benchmark_out_format=json for the raw JSON
// (bench/run.sh does). --smoke runs a few iterations of every case, to
// check that the binary works; its figures mean nothing. Exits 1 if a case
// failed.
//
// This file also replaces the global operator new, so that every case can
// count the heap allocations of its timed loop (harness.hpp).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "harness.hpp"
#include "report.hpp"

// ---- counting operator new ---------------------------------------------------
// Every form of the global operator new counts one allocation. The library
// is a shared object, but the executable's definitions interpose, so its
// allocations are counted too.

namespace {
std::atomic<std::uint64_t> g_allocations{0};

void* counted_alloc(std::size_t n) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* counted_aligned_alloc(std::size_t n, std::align_val_t al) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const auto a = static_cast<std::size_t>(al);
  const std::size_t rounded = (n + a - 1) / a * a;  // aligned_alloc wants a multiple
  return std::aligned_alloc(a, rounded == 0 ? a : rounded);
}
}  // namespace

std::uint64_t shmsem_bench::allocations() noexcept {
  return g_allocations.load(std::memory_order_relaxed);
}

void* operator new(std::size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return counted_alloc(n);
}
void* operator new(std::size_t n, std::align_val_t al) {
  if (void* p = counted_aligned_alloc(n, al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) {
  if (void* p = counted_aligned_alloc(n, al)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return counted_aligned_alloc(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return counted_aligned_alloc(n, al);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}

// ---- main ------------------------------------------------------------------------

namespace {

shmsem_bench::Config smoke_config() {
  shmsem_bench::Config c;
  c.smoke = true;
  c.repetitions = 1;
  c.wake_trials = 20;
  c.contend_procs = {2};
  c.contend_window = std::chrono::milliseconds(30);
  c.reclaim_trials = 3;
  c.reclaim_timeout = std::chrono::milliseconds(1000);
  c.idle_window = std::chrono::milliseconds(100);
  c.held_counts = {1, 100};
  c.reap_leases = 1000;
  c.reap_trials = 1;
  c.fleet_workers = {20};
  c.fleet_window = std::chrono::milliseconds(200);
  c.fleet_short_lived = {20};
  c.fleet_herd = {20};
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  std::string table_out;
  std::vector<char*> args;
  bool min_time_given = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0) {
      smoke = true;
    } else if (std::strncmp(argv[i], "--table_out=", 12) == 0) {
      table_out = argv[i] + 12;
    } else {
      min_time_given = min_time_given || std::strncmp(argv[i], "--benchmark_min_time", 20) == 0;
      args.push_back(argv[i]);
    }
  }
  // 0.2 s per repetition of a hot-path case gives millions of iterations,
  // and keeps the whole run well under 10 minutes on a loaded 2-core machine.
  static char full_min_time[] = "--benchmark_min_time=0.2";
  static char smoke_min_time[] = "--benchmark_min_time=0.001";
  if (!min_time_given) args.insert(args.begin() + 1, smoke ? smoke_min_time : full_min_time);
  int bench_argc = static_cast<int>(args.size());
  args.push_back(nullptr);

  shmsem_bench::set_config(smoke ? smoke_config() : shmsem_bench::Config{});
  benchmark::Initialize(&bench_argc, args.data());
  if (benchmark::ReportUnrecognizedArguments(bench_argc, args.data())) return 2;

  shmsem_bench::register_uncontended();
  shmsem_bench::register_wake_latency();
  shmsem_bench::register_contended();
  shmsem_bench::register_crash_reclaim();
  shmsem_bench::register_scaling();
  shmsem_bench::register_fleet();
  shmsem_bench::register_redis();
  shmsem_bench::register_command_line();
  shmsem_bench::register_node();

  const std::string load_at_start = shmsem_bench::load_average();
  shmsem_bench::CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  const std::string report = shmsem_bench::render_report(reporter.results(), smoke, load_at_start);
  std::printf("\n%s", report.c_str());
  if (!table_out.empty()) {
    std::ofstream out(table_out);
    out << report;
    if (!out) {
      std::fprintf(stderr, "shmsem-bench: cannot write %s\n", table_out.c_str());
      return 1;
    }
  }
  const auto errors = reporter.errors();
  for (const auto& e : errors) std::fprintf(stderr, "shmsem-bench: FAILED %s\n", e.c_str());
  return errors.empty() ? 0 : 1;
}
