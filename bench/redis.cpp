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
//
// The server is Debian's redis-server, started here in a temporary folder
// (the same helper as the tests'), and stopped at the end of the run.
#include <hiredis.h>
#include <shmsem/shmsem.hpp>

#include <atomic>
#include <cstdint>
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
long long client_commands(redisContext* c);

void BM_RedisAcquireRelease(State& state, bool over_tcp) {
  const std::string url = the_servers().url(over_tcp, bench_key("pair"));
  auto sem = shmsem::Semaphore::open(url, 8);
  sem.acquire().release();  // scripts cached, connection pooled
  redisContext* c = connect(over_tcp);
  const long long before = client_commands(c);
  for (auto _ : state) sem.acquire().release();
  // The round trips counted, not timed: one script each way.
  state.counters["commands_per_pair"] =
      static_cast<double>(client_commands(c) - before) / static_cast<double>(state.iterations());
  redisFree(c);
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

// Calls of each command the server ran, from INFO commandstats. The calls
// that scripts make count there too; only the commands below come from
// clients (a script never sends them).
const char* const kClientCommands[] = {"evalsha",     "eval", "ping",   "subscribe",
                                       "unsubscribe", "auth", "select", "cluster"};
std::map<std::string, long long> command_calls(redisContext* c) {
  auto* r = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"));
  if (!r) throw std::runtime_error("INFO failed");
  std::map<std::string, long long> out;
  const std::string text(r->str, r->len);
  freeReplyObject(r);
  std::size_t pos = 0;
  while ((pos = text.find("cmdstat_", pos)) != std::string::npos) {
    const auto colon = text.find(':', pos);
    const auto calls = text.find("calls=", colon);
    out[text.substr(pos + 8, colon - pos - 8)] = std::stoll(text.substr(calls + 6));
    pos = colon;
  }
  return out;
}

long long client_commands(redisContext* c) {
  long long n = 0;
  for (const auto& [cmd, calls] : command_calls(c))
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
    redisContext* c = connect(false);
    const auto before = command_calls(c);
    const std::int64_t t0 = now_ns();
    std::this_thread::sleep_for(window);
    const auto after = command_calls(c);
    const double seconds = static_cast<double>(now_ns() - t0) / 1e9;
    redisFree(c);
    long long evalsha = 0, other = 0;
    for (const char* cmd : kClientCommands) {
      const long long d =
          (after.count(cmd) ? after.at(cmd) : 0) - (before.count(cmd) ? before.at(cmd) : 0);
      (std::string_view(cmd) == "evalsha" ? evalsha : other) += d;
    }
    for (pid_t w : waiters) kill_child(w);
    const double periods = seconds / std::chrono::duration<double>(period).count();
    state.counters["commands_per_s"] = static_cast<double>(evalsha + other) / seconds;
    state.counters["per_waiter_per_period"] =
        static_cast<double>(evalsha + other) / (kIdleWaiters * periods);
    state.counters["other_commands"] = static_cast<double>(other);  // no polling: 0
    state.counters["period_ms"] =
        static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(period).count());
    state.counters["waiters"] = kIdleWaiters;
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
  register_process("BM_RedisReclaim/unix", BM_RedisReclaim);
  register_process("BM_RedisIdleWaiters/unix", BM_RedisIdleWaiters);
}

}  // namespace shmsem_bench
