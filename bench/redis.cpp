// bench/redis.cpp: the Redis backend against a private redis-server, on a
// unix socket and on TCP, in the same run as its floor.
//
//   BM_RedisPing/{unix,tcp}            one PING round trip (hiredis): the floor
//   BM_RedisAcquireRelease/{unix,tcp}  uncontended acquire+release; the report
//                                      divides it by the PING (target 2.2)
//   BM_RedisWakeLatency/{unix,tcp}     a release in process A to the return of
//                                      B's blocked acquire (target p50 1 ms)
//   BM_RedisReclaim/unix               SIGKILL of the holder to the return of a
//                                      blocked waiter's acquire, against the
//                                      session timeout
//   BM_RedisIdleWaiters/unix           commands the server runs for 50 blocked
//                                      waiters in 50 processes, per waiter and
//                                      renewal period (target 1), and which
//   BM_RedisPeerPair/{unix,tcp}        uncontended acquire+release of shmsem and
//                                      of the npm package redis-semaphore
//                                      (bench/node), in turns on the same server;
//                                      target: shmsem at most 0.75x the peer
//
// The server is Debian's redis-server, started here in a temporary folder
// (the same helper as the tests'), and stopped at the end of the run.
#include <hiredis.h>
#include <sys/wait.h>
#include <shmsem/shmsem.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "redis_server.hpp"

namespace shmsem_bench {
namespace {

using benchmark::State;
using namespace std::chrono_literals;

// One server for the whole run, reachable both ways.
struct servers {
  shmsem::test::redis_server unix_socket;
  shmsem::test::redis_server tcp{{.tcp = true}};
  std::string url(bool over_tcp, const std::string& key) const {
    return (over_tcp ? tcp : unix_socket).url(key);
  }
};

servers& the_servers() {
  static servers s;
  return s;
}

std::string bench_key(const char* tag) {
  std::string k = unique_name(tag);
  for (char& c : k)
    if (c != '.' && c != '_' && c != '-' && !std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return k;
}

redisContext* connect(bool over_tcp) {
  const auto& s = the_servers();
  redisContext* c = over_tcp ? redisConnect("127.0.0.1", s.tcp.port())
                             : redisConnectUnix(s.unix_socket.socket_path().c_str());
  if (!c || c->err) throw std::runtime_error("cannot connect to the benchmark's redis-server");
  return c;
}

// ---- the floor and the uncontended pair -------------------------------------

void BM_RedisPing(State& state, bool over_tcp) {
  redisContext* c = connect(over_tcp);
  for (auto _ : state) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
    if (!r) {
      state.SkipWithError("PING failed");
      break;
    }
    freeReplyObject(r);
  }
  redisFree(c);
}

// Commands clients sent (as INFO commandstats counts them).
long long client_commands(const shmsem::test::redis_server& srv);

void BM_RedisAcquireRelease(State& state, bool over_tcp) {
  const std::string url = the_servers().url(over_tcp, bench_key("pair"));
  auto sem = shmsem::Semaphore::open(url, 8);
  sem.acquire().release();  // scripts cached, connection pooled
  const auto& srv = over_tcp ? the_servers().tcp : the_servers().unix_socket;
  const long long before = client_commands(srv);
  for (auto _ : state) sem.acquire().release();
  // The round trips counted, not timed: one function call each way.
  state.counters["commands_per_pair"] =
      static_cast<double>(client_commands(srv) - before) / static_cast<double>(state.iterations());
  shmsem::Semaphore::remove(url);
}

// ---- wake latency --------------------------------------------------------------

struct WakeShared {
  std::atomic<std::int64_t> t0{0};
  std::atomic<int> entering{0};
};

void BM_RedisWakeLatency(State& state, bool over_tcp) {
  const int trials = config().smoke ? 10 : 300;
  const std::string url = the_servers().url(over_tcp, bench_key("wake"));
  for (auto _ : state) {
    SharedArray<WakeShared> shared(1);
    SharedArray<std::int64_t> latency(static_cast<std::size_t>(trials));
    Pipe go, done;
    const pid_t waiter = spawn([&] {
      auto sem = shmsem::Semaphore::open(url, 1);
      for (int i = 0; i < trials; ++i) {
        if (go.receive(60s) != 'g') throw std::runtime_error("waiter: no start signal");
        shared[0].entering.store(i + 1);
        auto p = sem.acquire();
        latency[static_cast<std::size_t>(i)] = now_ns() - shared[0].t0.load();
        p.release();
        done.send();
      }
    });
    const pid_t releaser = spawn([&] {
      auto sem = shmsem::Semaphore::open(url, 1);
      for (int i = 0; i < trials; ++i) {
        auto p = sem.acquire();
        go.send('g');
        // Queued in Redis, and asleep: only then does the clock start.
        if (!spin_until([&] { return shared[0].entering.load() == i + 1; }) ||
            !spin_until([&] { return sem.waiters() == 1; }) || !wait_until_asleep(waiter))
          throw std::runtime_error("releaser: the waiter never blocked");
        shared[0].t0.store(now_ns());
        p.release();
        if (done.receive(60s) != '.') throw std::runtime_error("releaser: waiter did not finish");
      }
    });
    const bool ok = reap_child(releaser, 600s);
    if (!reap_child(waiter, ok ? 60s : 1s) || !ok) {
      state.SkipWithError("a wake-latency process failed (see stderr)");
      return;
    }
    const Percentiles p =
        percentiles(std::vector<std::int64_t>(latency.data(), latency.data() + trials));
    state.counters["median_ns"] = p.median;
    state.counters["p99_ns"] = p.p99;
    state.counters["trials"] = static_cast<double>(p.count);
  }
  shmsem::Semaphore::remove(url);
}

// ---- reclaim after SIGKILL -------------------------------------------------------

constexpr auto kReclaimSession = 1000ms;

void BM_RedisReclaim(State& state) {
  const int trials = config().smoke ? 1 : 5;
  const std::string url = the_servers().url(false, bench_key("reclaim"));
  const shmsem::Options opts{.session_timeout = kReclaimSession};
  for (auto _ : state) {
    auto sem = shmsem::Semaphore::open(url, 1, opts);
    std::vector<std::int64_t> sample;
    for (int i = 0; i < trials; ++i) {
      Pipe ready;
      const pid_t holder = spawn([&] {
        auto s = shmsem::Semaphore::open(url, 1, opts);
        auto p = s.acquire();
        ready.send();
        for (;;) ::pause();
      });
      if (ready.receive(60s) != '.') {
        kill_child(holder);
        state.SkipWithError("the holder never got the seat");
        return;
      }
      std::atomic<std::int64_t> t1{0};
      std::thread waiter([&] {
        auto p = sem.acquire(1, {.wait_timeout = 60s});
        t1 = now_ns();
      });
      if (!spin_until([&] { return sem.waiters() == 1; })) {
        kill_child(holder);
        waiter.join();
        state.SkipWithError("the waiter never queued");
        return;
      }
      const std::int64_t t0 = now_ns();
      kill_child(holder);
      waiter.join();
      sample.push_back(t1.load() - t0);
    }
    const Percentiles p = percentiles(sample);
    state.counters["median_ns"] = p.median;
    state.counters["max_ns"] = p.max;
    state.counters["session_ms"] = static_cast<double>(kReclaimSession.count());
    state.counters["trials"] = static_cast<double>(p.count);
  }
  shmsem::Semaphore::remove(url);
}

// ---- idle waiters ------------------------------------------------------------------

constexpr int kIdleWaiters = 50;

// Commands that clients send (as INFO commandstats counts them); the calls
// that functions make count there too, but a function never sends these.
const char* const kClientCommands[] = {"fcall",       "function|load", "ping",   "subscribe",
                                       "unsubscribe", "auth",          "select", "cluster"};

long long client_commands(const shmsem::test::redis_server& srv) {
  long long n = 0;
  for (const auto& [cmd, calls] : srv.command_calls())
    for (const char* client_cmd : kClientCommands)
      if (cmd == client_cmd) n += calls;
  return n;
}

void BM_RedisIdleWaiters(State& state) {
  const std::string url = the_servers().url(false, bench_key("idle"));
  // The default session: renewals every second.
  const auto session = shmsem::Options{}.session_timeout;
  const auto period = session / 3;
  const auto window = config().smoke ? period : 5 * period;
  for (auto _ : state) {
    // The holder's own session is not the waiters': with an hour's timeout
    // it is not renewed during the window.
    auto sem = shmsem::Semaphore::open(url, 1, {.session_timeout = std::chrono::hours(1)});
    auto held = sem.acquire();
    std::vector<pid_t> waiters;
    for (int i = 0; i < kIdleWaiters; ++i)
      waiters.push_back(spawn([&] {
        auto s = shmsem::Semaphore::open(url, 1);
        auto p = s.acquire(1, {.wait_timeout = 600s});
      }));
    if (!spin_until([&] { return sem.waiters() == kIdleWaiters; }, 120s)) {
      for (pid_t w : waiters) kill_child(w);
      state.SkipWithError("the waiters never all queued");
      return;
    }
    // Past their subscription and the first renewal: idle from here.
    std::this_thread::sleep_for(period);
    const auto& srv = the_servers().unix_socket;
    const auto before = srv.command_calls();
    const std::int64_t t0 = now_ns();
    std::this_thread::sleep_for(window);
    const auto after = srv.command_calls();
    const double seconds = static_cast<double>(now_ns() - t0) / 1e9;
    long long renewals = 0, other = 0;
    for (const char* cmd : kClientCommands) {
      const long long d =
          (after.count(cmd) ? after.at(cmd) : 0) - (before.count(cmd) ? before.at(cmd) : 0);
      (std::string_view(cmd) == "fcall" ? renewals : other) += d;
    }
    for (pid_t w : waiters) kill_child(w);
    const double periods = seconds / std::chrono::duration<double>(period).count();
    state.counters["commands_per_s"] = static_cast<double>(renewals + other) / seconds;
    state.counters["per_waiter_per_period"] =
        static_cast<double>(renewals + other) / (kIdleWaiters * periods);
    state.counters["other_commands"] = static_cast<double>(other);  // no polling: 0
    state.counters["period_ms"] =
        static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(period).count());
    state.counters["waiters"] = kIdleWaiters;
  }
  shmsem::Semaphore::remove(url);
}

// ---- the peer: redis-semaphore (npm) ---------------------------------------------

// What the Node driver said: its time per pair, or why there is none.
struct peer_run {
  double ns_per_pair = 0;
  int status = 0;  // 0 measured, 1 no node, 2 packages not installed, 3 failed
};

peer_run run_node_peer(bool over_tcp, int pairs) {
  const auto& s = the_servers();
  // The driver and its package.json live in bench/node; scripts/deps.sh
  // bench installs its node_modules with `npm ci` (never the build).
  std::string cmd = "node '" SHMSEM_BENCH_NODE_DIR "/redis-semaphore-pair.js' --pairs " +
                    std::to_string(pairs) + " --key '" + bench_key("peer") + "' ";
  cmd += over_tcp ? "--port " + std::to_string(s.tcp.port())
                  : "--socket '" + s.unix_socket.socket_path() + "'";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return {0, 3};
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) out += buf;
  const int rc = ::pclose(f);
  const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (code == 127) return {0, 1};  // the shell found no node
  if (code == 2) return {0, 2};
  const auto at = out.find("\"ns_per_pair\":");
  if (code != 0 || at == std::string::npos) return {0, 3};
  return {std::strtod(out.c_str() + at + 14, nullptr), 0};
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// shmsem and redis-semaphore in turns (shmsem, peer, shmsem, peer, ...),
// the same number of uncontended pairs each, on the same server: the
// machine's noise falls on both alike. Medians of the turns are reported.
void BM_RedisPeerPair(State& state, bool over_tcp) {
  const int turns = config().smoke ? 1 : 5;
  const int pairs = config().smoke ? 50 : 2000;
  const std::string url = the_servers().url(over_tcp, bench_key("peerpair"));
  for (auto _ : state) {
    auto sem = shmsem::Semaphore::open(url, 8);
    std::vector<double> ours, theirs;
    int peer_status = 0;
    for (int turn = 0; turn < turns; ++turn) {
      for (int i = 0; i < std::min(pairs, 200); ++i) sem.acquire().release();
      const std::int64_t t0 = now_ns();
      for (int i = 0; i < pairs; ++i) sem.acquire().release();
      ours.push_back(static_cast<double>(now_ns() - t0) / pairs);
      if (peer_status != 0) continue;
      const peer_run p = run_node_peer(over_tcp, pairs);
      peer_status = p.status;
      if (p.status == 0) theirs.push_back(p.ns_per_pair);
    }
    const auto [lo, hi] = std::minmax_element(ours.begin(), ours.end());
    state.counters["shmsem_ns"] = median_of(ours);
    state.counters["shmsem_min_ns"] = *lo;
    state.counters["shmsem_max_ns"] = *hi;
    state.counters["turns"] = turns;
    state.counters["peer_status"] = peer_status;
    if (!theirs.empty()) {
      const auto [plo, phi] = std::minmax_element(theirs.begin(), theirs.end());
      state.counters["peer_ns"] = median_of(theirs);
      state.counters["peer_min_ns"] = *plo;
      state.counters["peer_max_ns"] = *phi;
    }
  }
  shmsem::Semaphore::remove(url);
}

}  // namespace

void register_redis() {
  for (bool tcp : {false, true}) {
    const std::string how = tcp ? "/tcp" : "/unix";
    register_hot("BM_RedisPing" + how, [tcp](State& s) { BM_RedisPing(s, tcp); })->UseRealTime();
    register_hot("BM_RedisAcquireRelease" + how, [tcp](State& s) {
      BM_RedisAcquireRelease(s, tcp);
    })->UseRealTime();
    register_process("BM_RedisWakeLatency" + how, [tcp](State& s) { BM_RedisWakeLatency(s, tcp); });
  }
  for (bool tcp : {false, true})
    register_process(std::string("BM_RedisPeerPair/") + (tcp ? "tcp" : "unix"),
                     [tcp](State& s) { BM_RedisPeerPair(s, tcp); });
  register_process("BM_RedisReclaim/unix", BM_RedisReclaim);
  register_process("BM_RedisIdleWaiters/unix", BM_RedisIdleWaiters);
}

}  // namespace shmsem_bench
