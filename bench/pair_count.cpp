// bench/pair_count.cpp: the instructions of one uncontended acquire+release
// pair, counted by callgrind (bench/callgrind.sh). Instruction counts do not
// move with the host's load the way timings do, so this is the figure that
// says whether a change made the hot path slower.
//
// Usage: shmsem-pair-count {acquire|ttl|try} PAIRS [KEY]
// Only the measured loop is instrumented (callgrind's client requests);
// callgrind.sh runs it for two loop lengths and divides the difference.
// KEY (default: a private shared-memory key) may be a Redis URL:
// redis-count.sh counts the server's instructions that way.
#include <shmsem/shmsem.hpp>

#include <unistd.h>
#include <valgrind/callgrind.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s {acquire|ttl|try|locked} PAIRS [KEY]\n", argv[0]);
    return 2;
  }
  const std::string_view mode = argv[1];
  const long pairs = std::atol(argv[2]);
  const std::string key = argc == 4 ? argv[3] : "bench.pair_count." + std::to_string(::getpid());
  int rc = 0;
  {
    // locked: a segment with fencing tokens, whose grants take the lock.
    auto sem = shmsem::Semaphore::open(key, 8, {.fencing = mode == "locked"});
    shmsem::AcquireOptions opts;
    if (mode == "ttl") opts.ttl = std::chrono::minutes(1);
    // Warm up: the first acquires take the locked path and fill this
    // thread's reserve of lease slots.
    for (int i = 0; i < 64; ++i) sem.acquire(1, opts).release();
    CALLGRIND_ZERO_STATS;
    CALLGRIND_TOGGLE_COLLECT;
    if (mode == "try") {
      for (long i = 0; i < pairs; ++i) sem.try_acquire(1, opts)->release();
    } else if (mode == "acquire" || mode == "ttl" || mode == "locked") {
      for (long i = 0; i < pairs; ++i) sem.acquire(1, opts).release();
    } else {
      rc = 2;
    }
    CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_DUMP_STATS;
  }
  shmsem::Semaphore::remove(key);
  return rc;
}
