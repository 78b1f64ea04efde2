// chaos.cpp: the chaos harness. P worker processes x T threads hammer one
// semaphore (acquire, try_acquire, timeouts, TTL leases, extend, auto-renew)
// while a controller SIGKILLs random workers at random moments, some of them
// exactly inside the segment's critical section or halfway through a
// lock-free acquire or release (through the test hooks), and starts
// replacements. An independent witness, kept in a shared page the
// library never sees, records every hold and checks the bound.
//
// The witness. Each worker thread owns one record in the page: the permit
// it holds (id, seats, TTL expiry), written AFTER acquire() returned and
// cleared BEFORE release() is called, so a record never claims more than
// the library granted. Every record is a seqlock (odd sequence while it is
// written). A snapshot reads every sequence, every record, then every
// sequence again: if nothing moved, all the records it saw coexisted at one
// instant, so the seats they add up to were held at once. Records of a
// worker the controller has doomed (marked before the kill) are left out,
// and so are records whose TTL has lapsed (they are counted separately).
// A snapshot whose sum exceeds the capacity is an over-admission.
//
// At the end, after every worker exited and reap() ran, it checks used() ==
// 0, no holder left, no permit id held twice, the stats identity
// acquired == released + reaped + expired + force_released, and that the
// library's counts agree with the witness's within what the kills can
// explain. It prints one line of figures and exits non-zero on any leak,
// hang, over-admission, crash or lost permit.
//
// The load (--load-procs N): production hosts are busy, and a holder can
// be preempted at any instruction for longer than its TTL. Beside the run,
// a load process forks waves of N short-lived processes that each open
// ANOTHER semaphore, acquire a seat, hold it 1 ms, release and exit: the
// fork and scheduling pressure of a prefork fleet on the same host.
#include <shmsem/shmsem.hpp>

#include <getopt.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "shm/segment.hpp"

namespace {

using shmsem::detail::testing::point;

constexpr int kMaxWorkers = 64;
constexpr int kMaxThreads = 16;

std::int64_t clock_ns(clockid_t id) {
  timespec ts;
  ::clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
std::int64_t now_ns() {
  return clock_ns(CLOCK_MONOTONIC);
}

struct config {
  double duration_s = 22;
  int workers = 6;
  int threads = 3;
  int capacity = 5;
  int bound = 0;  // what the witness checks against; 0: the capacity (see --bound)
  bool expect_over_admission = false;  // the witness's self-test (see --bound)
  int max_n = 3;
  int kill_interval_ms = 120;
  int cs_kill_percent = 30;  // of kills, the share sent inside the critical section
  int hang_margin_ms = 5000;
  int untimed_budget_ms = 20000;  // budget assumed for acquires without a timeout
  long min_kills = 0;
  long min_cs_kills = 0;
  int load_procs = 0;       // processes per wave of the background load; 0: none
  int load_pause_ms = 100;  // pause between waves
  shmsem::Fairness fairness = shmsem::Fairness::fifo;
  std::uint64_t seed = 0;
  std::string key;
};

// --- the witness page --------------------------------------------------------

struct record {
  std::atomic<std::uint32_t> seq;  // odd while being written
  std::atomic<std::uint64_t> permit_id;
  std::atomic<std::int32_t> seats;
  std::atomic<std::int64_t> expires_ns;  // 0: no TTL (CLOCK_MONOTONIC)
};

struct thread_slot {
  record rec;
  std::atomic<std::int64_t> busy_since;  // start of the call in progress, 0: none
  std::atomic<std::int64_t> budget_ns;   // what that call may legitimately take
  std::atomic<std::uint32_t> hang_reported;
  // Cumulative counters (survive the worker's death).
  std::atomic<std::uint64_t> ops, acquired, released, timeouts, try_failures, lapsed, unexpected,
      extends, extend_lost;
};

struct worker_slot {
  std::atomic<std::int32_t> pid;
  std::atomic<std::uint32_t> doomed;       // its records no longer count: it is being killed
  std::atomic<std::uint32_t> die_request;  // 1 + point: die there (set by the controller)
  std::atomic<std::uint32_t> died_at;      // 1 + point where it killed itself
  thread_slot threads[kMaxThreads];
};

struct witness {
  std::atomic<std::uint32_t> stop;
  worker_slot workers[kMaxWorkers];
  // The background load's figures.
  std::atomic<std::uint64_t> load_procs, load_waves, load_failures;
};

witness* W = nullptr;
worker_slot* self_slot = nullptr;  // in a worker process

void write_record(record& r, std::uint64_t id, int seats, std::int64_t expires) {
  r.seq.fetch_add(1);
  r.permit_id.store(id);
  r.seats.store(seats);
  r.expires_ns.store(expires);
  r.seq.fetch_add(1);
}

void clear_record(record& r) {
  r.seq.fetch_add(1);
  r.permit_id.store(0);
  r.seats.store(0);
  r.expires_ns.store(0);
  r.seq.fetch_add(1);
}

// --- a worker process ----------------------------------------------------------

void die_in_critical_section(point p, std::string_view) {
  if (!self_slot) return;
  const std::uint32_t want = self_slot->die_request.load(std::memory_order_relaxed);
  if (want == 0 || want != static_cast<std::uint32_t>(p) + 1) return;
  self_slot->doomed.store(1);
  self_slot->died_at.store(want);
  ::raise(SIGKILL);
}

struct busy_guard {
  thread_slot& t;
  busy_guard(thread_slot& s, std::int64_t budget) : t(s) {
    t.budget_ns.store(budget);
    t.busy_since.store(now_ns());
  }
  ~busy_guard() { t.busy_since.store(0); }
};

std::int64_t expiry_of(const shmsem::Permit& p) {
  auto e = p.expires_at();
  return e ? std::chrono::duration_cast<std::chrono::nanoseconds>(e->time_since_epoch()).count()
           : 0;
}

void worker_thread(const config& cfg, shmsem::Semaphore& sem, thread_slot& t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pct = [&] { return static_cast<int>(rng() % 100); };
  auto between = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  constexpr std::int64_t kNoWait = 0;  // calls that never wait for seats
  while (!W->stop.load(std::memory_order_relaxed)) {
    t.ops.fetch_add(1, std::memory_order_relaxed);
    const int n = between(1, std::min(cfg.max_n, cfg.capacity));
    shmsem::AcquireOptions o;
    const bool with_ttl = pct() < 35;
    if (with_ttl) {
      o.ttl = std::chrono::milliseconds(between(20, 120));
      o.auto_renew = pct() < 15;
    } else if (pct() < 10) {
      o.ttl = std::chrono::milliseconds(0);  // explicit "no expiry"
    }
    std::optional<shmsem::Permit> p;
    const int kind = pct();
    try {
      if (kind < 30) {
        busy_guard g(t, kNoWait);
        p = sem.try_acquire(n, o);
        if (!p) t.try_failures.fetch_add(1, std::memory_order_relaxed);
      } else if (kind < 85) {
        const int budget = between(0, 300);
        o.wait_timeout = std::chrono::milliseconds(budget);
        busy_guard g(t, std::int64_t{budget} * 1'000'000);
        p = sem.acquire(n, o);
      } else {
        busy_guard g(t, std::int64_t{cfg.untimed_budget_ms} * 1'000'000);
        p = sem.acquire(n, o);
      }
    } catch (const shmsem::AcquisitionError& e) {
      if (e.reason() == shmsem::Reason::timeout)
        t.timeouts.fetch_add(1, std::memory_order_relaxed);
      else
        t.unexpected.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (!p) continue;
    t.acquired.fetch_add(1, std::memory_order_relaxed);
    write_record(t.rec, p->id(), p->weight(), expiry_of(*p));
    // Hold: mostly short; sometimes extend; now and then overstay the TTL.
    int hold_ms = between(0, 8);
    if (with_ttl && pct() < 4) hold_ms = static_cast<int>(o.ttl->count()) + between(10, 40);
    if (hold_ms) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    if (with_ttl && pct() < 25) {
      const int ttl_ms = between(20, 120);
      // An extension may shorten the lease. Until the record has the new
      // expiry, it must not claim a later one than the library's, which
      // reads its coarse clock after this read: take the lower bound.
      const std::int64_t at_least = clock_ns(CLOCK_MONOTONIC_COARSE) + ttl_ms * 1'000'000LL;
      if (at_least < t.rec.expires_ns.load()) write_record(t.rec, p->id(), p->weight(), at_least);
      try {
        busy_guard g(t, kNoWait);
        p->extend(std::chrono::milliseconds(ttl_ms));
        write_record(t.rec, p->id(), p->weight(), expiry_of(*p));
        t.extends.fetch_add(1, std::memory_order_relaxed);
      } catch (const shmsem::ExtensionError&) {
        t.extend_lost.fetch_add(1, std::memory_order_relaxed);  // TTL ran out first
      }
    }
    clear_record(t.rec);
    try {
      busy_guard g(t, kNoWait);
      p->release();
      t.released.fetch_add(1, std::memory_order_relaxed);
    } catch (const shmsem::PermitNotHeldError&) {
      // Only a TTL lease may be lost while its holder lives.
      (with_ttl ? t.lapsed : t.unexpected).fetch_add(1, std::memory_order_relaxed);
    }
  }
}

[[noreturn]] void run_worker(const config& cfg, int index, std::uint64_t seed) {
  self_slot = &W->workers[index];
  shmsem::detail::testing::set_hook(die_in_critical_section);
  int status = 0;
  try {
    shmsem::Semaphore sem = shmsem::Semaphore::open(cfg.key, cfg.capacity);
    std::vector<std::thread> threads;
    for (int i = 0; i < cfg.threads; ++i)
      threads.emplace_back([&, i] {
        worker_thread(cfg, sem, self_slot->threads[i], seed * 131 + static_cast<std::uint64_t>(i));
      });
    for (auto& th : threads) th.join();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chaos worker %d: %s\n", ::getpid(), e.what());
    status = 3;
  }
  std::fflush(nullptr);
  ::_exit(status);
}

// --- the controller ------------------------------------------------------------------

constexpr std::size_t kPointCount = static_cast<std::size_t>(point::fast_released) + 1;

struct totals {
  long kills = 0, cs_kills = 0, crashes = 0, hangs = 0, held_twice = 0;
  // Kept apart: the witness's own finding, and the library's word for the
  // same fault. Only the first proves the witness can see one.
  long over_admissions = 0, used_over_bound = 0;
  long kills_at[kPointCount] = {};  // inside-the-operation kills, by hook point
  long snapshots = 0, unstable = 0, lapsed_in_snapshot = 0, undercounts = 0;
  int max_concurrent = 0;
};

// Readies a slot for a new worker: a killed one may have died mid-write.
void reset_slot(worker_slot& w) {
  for (auto& t : w.threads) {
    const std::uint32_t s = t.rec.seq.load();
    t.rec.permit_id.store(0);
    t.rec.seats.store(0);
    t.rec.expires_ns.store(0);
    t.rec.seq.store((s | 1U) + 1);  // even again, and different
    t.busy_since.store(0);
    t.hang_reported.store(0);
  }
  w.die_request.store(0);
  w.died_at.store(0);
  w.doomed.store(0);
}

pid_t spawn(const config& cfg, int index, std::uint64_t seed) {
  reset_slot(W->workers[index]);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("chaos: fork");
    std::exit(2);
  }
  if (pid == 0) run_worker(cfg, index, seed);
  W->workers[index].pid.store(pid);
  return pid;
}

// One consistent snapshot of the records; false if writers kept moving.
// It also reads the library's count of seats in use within the same
// window: if no record moved, every seat they add up to was held when it
// was read, so a smaller count is an undercount (the gate would admit more
// than the bound).
bool snapshot(const config& cfg, totals& t, const shmsem::Semaphore& sem) {
  std::uint32_t seq[kMaxWorkers][kMaxThreads];
  for (int attempt = 0; attempt < 50; ++attempt) {
    bool odd = false;
    for (int w = 0; w < cfg.workers; ++w)
      for (int i = 0; i < cfg.threads; ++i) {
        seq[w][i] = W->workers[w].threads[i].rec.seq.load();
        odd |= (seq[w][i] & 1U) != 0 && !W->workers[w].doomed.load();
      }
    if (odd) continue;
    struct seen {
      std::uint64_t id;
      int seats;
      std::int64_t expires;
      int worker, thread;
    };
    std::vector<seen> held;
    bool doomed[kMaxWorkers];
    for (int w = 0; w < cfg.workers; ++w) {
      doomed[w] = W->workers[w].doomed.load() != 0;
      if (doomed[w]) continue;
      for (int i = 0; i < cfg.threads; ++i) {
        const record& r = W->workers[w].threads[i].rec;
        const std::uint64_t id = r.permit_id.load();
        if (id != 0) held.push_back({id, r.seats.load(), r.expires_ns.load(), w, i});
      }
    }
    const int used = sem.used();
    const std::int64_t used_read = now_ns();
    bool stable = true;
    for (int w = 0; w < cfg.workers && stable; ++w) {
      if (doomed[w]) continue;
      for (int i = 0; i < cfg.threads && stable; ++i)
        stable = W->workers[w].threads[i].rec.seq.load() == seq[w][i];
    }
    if (!stable) continue;
    // Leases whose TTL may have run out by then may be reclaimed already.
    int surely_held = 0;
    for (const seen& s : held)
      if (s.expires == 0 || s.expires > used_read) surely_held += s.seats;
    if (used < surely_held && ++t.undercounts <= 5)
      std::fprintf(stderr, "chaos: UNDERCOUNT: used() = %d while %d seats were held\n", used,
                   surely_held);
    // A TTL lease counts as lapsed by the clock read after the scan: the
    // library reclaims it only once its (coarse, never ahead) clock passed
    // the expiry, so this never counts a seat the library may have re-granted.
    const std::int64_t after = now_ns();
    int sum = 0, lapsed = 0;
    std::vector<std::uint64_t> ids;
    for (const seen& s : held) {
      ids.push_back(s.id);
      if (s.expires != 0 && s.expires <= after)
        ++lapsed;
      else
        sum += s.seats;
    }
    ++t.snapshots;
    t.lapsed_in_snapshot += lapsed;
    t.max_concurrent = std::max(t.max_concurrent, sum);
    if (sum > cfg.bound && ++t.over_admissions <= 5) {
      std::fprintf(stderr, "chaos: OVER-ADMISSION: %d seats held at once, capacity %d:", sum,
                   cfg.capacity);
      for (const seen& s : held)
        std::fprintf(stderr, " [worker %d thread %d permit %" PRIu64 " seats %d expiry %s%.3f ms]",
                     s.worker, s.thread, s.id, s.seats, s.expires ? "in " : "none ",
                     s.expires ? static_cast<double>(s.expires - after) / 1e6 : 0.0);
      std::fprintf(stderr, "\n");
    }
    std::sort(ids.begin(), ids.end());
    if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
      ++t.held_twice;
      std::fprintf(stderr, "chaos: a permit id is held twice\n");
    }
    return true;
  }
  ++t.unstable;
  return false;
}

void check_hangs(const config& cfg, totals& t) {
  const std::int64_t now = now_ns();
  const std::int64_t margin = std::int64_t{cfg.hang_margin_ms} * 1'000'000;
  for (int w = 0; w < cfg.workers; ++w) {
    worker_slot& ws = W->workers[w];
    if (ws.doomed.load()) continue;
    for (int i = 0; i < cfg.threads; ++i) {
      thread_slot& ts = ws.threads[i];
      const std::int64_t since = ts.busy_since.load();
      if (since == 0 || now - since <= ts.budget_ns.load() + margin) continue;
      if (ts.hang_reported.exchange(1)) continue;
      ++t.hangs;
      std::fprintf(stderr, "chaos: HANG: worker %d thread %d blocked for %.1f s (budget %.1f s)\n",
                   ws.pid.load(), i, static_cast<double>(now - since) / 1e9,
                   static_cast<double>(ts.budget_ns.load()) / 1e9);
    }
  }
}

int index_of(const config& cfg, pid_t pid) {
  for (int w = 0; w < cfg.workers; ++w)
    if (W->workers[w].pid.load() == pid) return w;
  return -1;
}

// Handles the exit of a worker; returns its slot, or -1 if not ours.
int on_exit(const config& cfg, pid_t pid, int status, totals& t, bool stopping) {
  const int w = index_of(cfg, pid);
  if (w < 0) return -1;
  worker_slot& ws = W->workers[w];
  const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  if (killed && ws.doomed.load()) {
    ++t.kills;
    if (const std::uint32_t at = ws.died_at.load()) {
      ++t.cs_kills;
      if (at - 1 < kPointCount) ++t.kills_at[at - 1];
    }
  } else if (!(stopping && WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    ++t.crashes;
    if (WIFSIGNALED(status))
      std::fprintf(stderr, "chaos: CRASH: worker %d died of signal %d\n", pid, WTERMSIG(status));
    else
      std::fprintf(stderr, "chaos: CRASH: worker %d exited with status %d\n", pid,
                   WEXITSTATUS(status));
  }
  ws.pid.store(0);
  return w;
}

// One short-lived process of the background load.
[[noreturn]] void load_process(const std::string& key) {
  int status = 0;
  try {
    shmsem::Semaphore s = shmsem::Semaphore::open(key, 8);
    shmsem::Permit p = s.acquire(1, {.wait_timeout = std::chrono::seconds(60)});
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the work it does
    p.release();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chaos: load process %d: %s\n", ::getpid(), e.what());
    status = 1;
  }
  ::_exit(status);
}

// Forks the load controller: waves of short-lived processes on another
// semaphore until the run stops. Returns its pid.
pid_t start_load(const config& cfg) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const std::string key = cfg.key + ".load";
  shmsem::Semaphore::remove(key);
  std::vector<pid_t> wave;
  while (!W->stop.load()) {
    wave.clear();
    for (int i = 0; i < cfg.load_procs && !W->stop.load(); ++i) {
      const pid_t child = ::fork();
      if (child == 0) load_process(key);
      if (child > 0) wave.push_back(child);
    }
    for (pid_t child : wave) {
      int status = 0;
      while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) W->load_failures.fetch_add(1);
    }
    W->load_procs.fetch_add(wave.size());
    W->load_waves.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(cfg.load_pause_ms));
  }
  shmsem::Semaphore::remove(key);
  ::_exit(0);
}

void usage() {
  std::fprintf(stderr,
               "usage: shmsem-chaos [--duration S] [--workers P] [--threads T] [--capacity C]\n"
               "         [--max-n N] [--kill-interval-ms MS] [--cs-kill-percent PCT]\n"
               "         [--hang-margin-ms MS] [--min-kills K] [--min-cs-kills K] [--seed S]\n"
               "         [--key KEY] [--bound B [--expect-over-admission]]\n"
               "         [--load-procs N] [--load-pause-ms MS] [--fairness fifo|barging]\n"
               "--bound checks the witness against B instead of the capacity. With\n"
               "B < capacity and --expect-over-admission the run is the witness's\n"
               "self-test: it fails unless the witness itself saw an over-admission.\n"
               "--load-procs runs waves of N short-lived processes on another semaphore\n"
               "beside the run, --load-pause-ms apart (a busy host). --fairness is the\n"
               "semaphore's, chosen at its creation here.\n");
}

bool parse(int argc, char** argv, config& c) {
  static const option opts[] = {{"duration", required_argument, nullptr, 'd'},
                                {"workers", required_argument, nullptr, 'w'},
                                {"threads", required_argument, nullptr, 't'},
                                {"capacity", required_argument, nullptr, 'c'},
                                {"max-n", required_argument, nullptr, 'n'},
                                {"kill-interval-ms", required_argument, nullptr, 'i'},
                                {"cs-kill-percent", required_argument, nullptr, 'p'},
                                {"hang-margin-ms", required_argument, nullptr, 'm'},
                                {"min-kills", required_argument, nullptr, 'k'},
                                {"min-cs-kills", required_argument, nullptr, 'K'},
                                {"seed", required_argument, nullptr, 's'},
                                {"key", required_argument, nullptr, 'y'},
                                {"bound", required_argument, nullptr, 'b'},
                                {"load-procs", required_argument, nullptr, 'L'},
                                {"load-pause-ms", required_argument, nullptr, 'P'},
                                {"expect-over-admission", no_argument, nullptr, 'x'},
                                {"fairness", required_argument, nullptr, 'f'},
                                {"help", no_argument, nullptr, 'h'},
                                {nullptr, 0, nullptr, 0}};
  int o;
  while ((o = ::getopt_long(argc, argv, "", opts, nullptr)) != -1) {
    switch (o) {
      case 'd':
        c.duration_s = std::atof(optarg);
        break;
      case 'w':
        c.workers = std::atoi(optarg);
        break;
      case 't':
        c.threads = std::atoi(optarg);
        break;
      case 'c':
        c.capacity = std::atoi(optarg);
        break;
      case 'n':
        c.max_n = std::atoi(optarg);
        break;
      case 'i':
        c.kill_interval_ms = std::atoi(optarg);
        break;
      case 'p':
        c.cs_kill_percent = std::atoi(optarg);
        break;
      case 'm':
        c.hang_margin_ms = std::atoi(optarg);
        break;
      case 'k':
        c.min_kills = std::atol(optarg);
        break;
      case 'K':
        c.min_cs_kills = std::atol(optarg);
        break;
      case 's':
        c.seed = std::strtoull(optarg, nullptr, 10);
        break;
      case 'y':
        c.key = optarg;
        break;
      case 'b':
        c.bound = std::atoi(optarg);
        break;
      case 'L':
        c.load_procs = std::atoi(optarg);
        break;
      case 'P':
        c.load_pause_ms = std::atoi(optarg);
        break;
      case 'x':
        c.expect_over_admission = true;
        break;
      case 'f':
        if (std::strcmp(optarg, "barging") == 0)
          c.fairness = shmsem::Fairness::barging;
        else if (std::strcmp(optarg, "fifo") != 0)
          return false;
        break;
      default:
        return false;
    }
  }
  return c.workers >= 1 && c.workers <= kMaxWorkers && c.threads >= 1 && c.threads <= kMaxThreads &&
         c.capacity >= 1 && c.max_n >= 1 && c.duration_s > 0 && c.kill_interval_ms >= 1 &&
         c.load_procs >= 0 && c.load_pause_ms >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  config cfg;
  if (!parse(argc, argv, cfg)) {
    usage();
    return 2;
  }
  if (cfg.bound == 0) cfg.bound = cfg.capacity;
  if (cfg.seed == 0)
    cfg.seed = static_cast<std::uint64_t>(now_ns()) ^ static_cast<std::uint64_t>(::getpid());
  if (cfg.key.empty()) cfg.key = "chaos." + std::to_string(::getpid());
  void* page =
      ::mmap(nullptr, sizeof(witness), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    std::perror("chaos: mmap");
    return 2;
  }
  W = new (page) witness{};
  std::mt19937_64 rng(cfg.seed);

  shmsem::Semaphore::remove(cfg.key);
  int rc = 0;
  {
    shmsem::Semaphore sem =
        shmsem::Semaphore::open(cfg.key, cfg.capacity, {.fairness = cfg.fairness});
    totals t;
    const pid_t load = cfg.load_procs > 0 ? start_load(cfg) : 0;
    int load_status = -1;
    for (int w = 0; w < cfg.workers; ++w) spawn(cfg, w, rng());

    const std::int64_t start = now_ns();
    const std::int64_t end = start + static_cast<std::int64_t>(cfg.duration_s * 1e9);
    std::int64_t next_kill = start + std::int64_t{cfg.kill_interval_ms} * 1'000'000;
    int pending_cs = -1;  // worker asked to die in the critical section
    std::int64_t pending_deadline = 0;
    while (now_ns() < end) {
      int status;
      pid_t pid;
      while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == load) {
          load_status = status;
          continue;
        }
        const int w = on_exit(cfg, pid, status, t, false);
        if (w < 0) continue;
        if (w == pending_cs) pending_cs = -1;
        spawn(cfg, w, rng());
      }
      snapshot(cfg, t, sem);
      if (sem.used() > cfg.bound && ++t.used_over_bound <= 5) {
        std::fprintf(stderr, "chaos: OVER-ADMISSION: used() = %d, capacity %d\n", sem.used(),
                     cfg.capacity);
      }
      check_hangs(cfg, t);
      const std::int64_t now = now_ns();
      if (pending_cs >= 0 && now > pending_deadline) {
        // It never reached the point (blocked elsewhere): kill it plainly.
        worker_slot& ws = W->workers[pending_cs];
        ws.die_request.store(0);
        ws.doomed.store(1);
        if (ws.pid.load() > 0) ::kill(ws.pid.load(), SIGKILL);
        pending_cs = -1;
      }
      if (now >= next_kill) {
        const int w = static_cast<int>(rng() % static_cast<std::uint64_t>(cfg.workers));
        worker_slot& ws = W->workers[w];
        if (ws.pid.load() > 0 && !ws.doomed.load() && w != pending_cs) {
          if (pending_cs < 0 && static_cast<int>(rng() % 100) < cfg.cs_kill_percent) {
            // Inside the segment lock, or halfway through a lock-free
            // acquire or release (no lock held there, so no EOWNERDEAD).
            static constexpr point kPoints[] = {point::locked,         point::mid_grant,
                                                point::mid_release,    point::mid_handoff,
                                                point::fast_acquiring, point::fast_admitted,
                                                point::fast_releasing, point::fast_released};
            ws.die_request.store(static_cast<std::uint32_t>(kPoints[rng() % std::size(kPoints)]) +
                                 1);
            pending_cs = w;
            // Some points are rare under contention (a lock-free grant when
            // waiters queue): give up soon, and kill the worker anyway.
            pending_deadline = now + 500'000'000;
          } else {
            ws.doomed.store(1);
            ::kill(ws.pid.load(), SIGKILL);
          }
        }
        // Random moments: anywhere from 0.2x to 1.8x the mean interval.
        const auto jitter = static_cast<std::int64_t>(rng() % 1601) + 200;
        next_kill = now + std::int64_t{cfg.kill_interval_ms} * jitter * 1000;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }

    // Stop: workers finish their current call, release and exit 0.
    W->stop.store(1);
    for (int w = 0; w < cfg.workers; ++w) W->workers[w].die_request.store(0);
    const std::int64_t stop_deadline =
        now_ns() + std::int64_t{cfg.untimed_budget_ms + cfg.hang_margin_ms} * 1'000'000;
    for (;;) {
      bool any = false;
      for (int w = 0; w < cfg.workers; ++w) any |= W->workers[w].pid.load() > 0;
      if (!any) break;
      int status;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        if (pid == load)
          load_status = status;
        else
          on_exit(cfg, pid, status, t, true);
        continue;
      }
      check_hangs(cfg, t);
      if (now_ns() > stop_deadline) {
        for (int w = 0; w < cfg.workers; ++w)
          if (W->workers[w].pid.load() > 0) {
            ++t.hangs;
            std::fprintf(stderr, "chaos: HANG: worker %d did not stop\n", W->workers[w].pid.load());
            W->workers[w].doomed.store(1);
            ::kill(W->workers[w].pid.load(), SIGKILL);
          }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double elapsed = static_cast<double>(now_ns() - start) / 1e9;
    if (load > 0 && load_status < 0)
      while (::waitpid(load, &load_status, 0) < 0 && errno == EINTR) {
      }

    // Every worker is gone: reclaim what the killed ones held.
    sem.reap();
    const shmsem::Stats st = sem.stats();
    const auto holders = sem.holders();
    const int leaked = sem.used() + static_cast<int>(holders.size());
    std::unordered_set<std::uint64_t> ids;
    for (const auto& h : holders)
      if (!ids.insert(h.permit_id).second) ++t.held_twice;
    const std::uint64_t ended = st.released + st.reaped + st.expired + st.force_released;
    const bool stats_add_up = st.acquired == ended;

    std::uint64_t ops = 0, acq = 0, rel = 0, timeouts = 0, tryf = 0, lapsed = 0, unexpected = 0,
                  extends = 0, extend_lost = 0;
    for (int w = 0; w < cfg.workers; ++w)
      for (int i = 0; i < cfg.threads; ++i) {
        const thread_slot& ts = W->workers[w].threads[i];
        ops += ts.ops.load();
        acq += ts.acquired.load();
        rel += ts.released.load();
        timeouts += ts.timeouts.load();
        tryf += ts.try_failures.load();
        lapsed += ts.lapsed.load();
        unexpected += ts.unexpected.load();
        extends += ts.extends.load();
        extend_lost += ts.extend_lost.load();
      }
    // Nothing lost: a kill can cut off at most one call per thread between
    // the library's bookkeeping and the witness's.
    const std::uint64_t slack = static_cast<std::uint64_t>(t.kills) * cfg.threads;
    const bool acquired_agree = st.acquired >= acq && st.acquired - acq <= slack;
    const bool released_agree = st.released >= rel && st.released - rel <= slack;
    const bool expired_agree = st.expired >= lapsed;
    const bool recoveries_agree = st.recoveries >= static_cast<std::uint64_t>(t.cs_kills);

    std::printf("chaos: ops=%" PRIu64 " acquired=%" PRIu64
                " kills=%ld kills_in_critical_section=%ld "
                "recoveries=%" PRIu64 " reaped=%" PRIu64 " expired=%" PRIu64 " ttl_lapsed=%" PRIu64
                " max_concurrent=%d/%d leaked=%d hangs=%ld over_admissions=%ld used_over_bound=%ld "
                "undercounts=%ld held_twice=%ld "
                "crashes=%ld unexpected_losses=%" PRIu64 " snapshots=%ld duration=%.1fs\n",
                ops, st.acquired, t.kills, t.cs_kills, st.recoveries, st.reaped, st.expired, lapsed,
                t.max_concurrent, cfg.capacity, leaked, t.hangs, t.over_admissions,
                t.used_over_bound, t.undercounts, t.held_twice, t.crashes, unexpected, t.snapshots,
                elapsed);
    std::printf("chaos: detail: witness acquired=%" PRIu64 " released=%" PRIu64 " timeouts=%" PRIu64
                " try_failures=%" PRIu64 " extends=%" PRIu64 " extend_lost=%" PRIu64
                " lapsed_in_snapshots=%ld unstable_snapshots=%ld; stats released=%" PRIu64
                " force_released=%" PRIu64 " timeouts=%" PRIu64 " seed=%" PRIu64 "\n",
                acq, rel, timeouts, tryf, extends, extend_lost, t.lapsed_in_snapshot, t.unstable,
                st.released, st.force_released, st.timeouts, cfg.seed);
    if (load > 0)
      std::printf("chaos: load: processes=%" PRIu64 " waves=%" PRIu64 " failures=%" PRIu64 "\n",
                  W->load_procs.load(), W->load_waves.load(), W->load_failures.load());
    std::printf("chaos: kills inside an operation, by point:");
    for (std::size_t i = 0; i < kPointCount; ++i)
      if (i != static_cast<std::size_t>(point::initializing))
        std::printf(" %s=%ld", shmsem::detail::testing::point_name(static_cast<point>(i)),
                    t.kills_at[i]);
    std::printf("\n");

    auto fail = [&](const char* what) {
      std::fprintf(stderr, "chaos: FAILED: %s\n", what);
      rc = 1;
    };
    if (leaked != 0) fail("seats leaked: used() or holders() not empty after reap");
    if (t.hangs) fail("a process stayed blocked past its budget");
    if (!cfg.expect_over_admission) {
      if (t.over_admissions || t.used_over_bound) fail("over-admission");
    } else if (t.over_admissions == 0) {
      fail("the witness saw no over-admission of --bound (used_over_bound does not count)");
    }
    if (t.undercounts) fail("undercount: the library counted fewer seats than were held");
    if (t.held_twice) fail("a permit id was held twice");
    if (t.crashes) fail("a worker crashed");
    if (unexpected) fail("a lease without TTL was lost by a live holder, or an acquire failed");
    if (!stats_add_up)
      fail("stats do not add up: acquired != released+reaped+expired+force_released");
    if (!acquired_agree)
      fail("stats.acquired disagrees with the witness beyond what kills explain");
    if (!released_agree)
      fail("stats.released disagrees with the witness beyond what kills explain");
    if (!expired_agree) fail("fewer expired leases than lapsed permits");
    if (!recoveries_agree) fail("fewer recoveries than deaths inside the critical section");
    if (sem.waiters() != 0) fail("waiters left in the queue");
    if (t.snapshots == 0) fail("the witness never took a consistent snapshot");
    if (t.kills < cfg.min_kills) fail("fewer kills than --min-kills");
    if (t.cs_kills < cfg.min_cs_kills)
      fail("fewer kills inside the critical section than --min-cs-kills");
    if (load > 0 && (load_status != 0 || W->load_failures.load() != 0))
      fail("the background load failed (a load process could not get its seat)");
    if (load > 0 && W->load_waves.load() == 0) fail("the background load never ran a wave");
  }
  shmsem::Semaphore::remove(cfg.key);
  return rc;
}
