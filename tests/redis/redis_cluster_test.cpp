// Redis-backed semaphores on a local three-master cluster: semaphores on
// every node through one URL, and the MOVED and ASK redirections of a slot
// being migrated while it is used. (The behavioural suite also runs on a
// cluster: the redis-cluster entries of tests/unit.)
#include <gtest/gtest.h>
#include <shmsem/shmsem.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "redis/hash.hpp"
#include "redis_server.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using detail::redis::key_slot;
using test::child_process;
using test::eventually;
using test::redis_cluster;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

struct slot_range {
  long lo, hi;
  int node;
};

// The slot map, as node 0 knows it.
std::vector<slot_range> slot_map(redis_cluster& c) {
  std::istringstream in(c.node(0).cli({"CLUSTER", "SLOTS"}));
  // redis-cli prints the nested reply flat: start, end, ip, port, id, ...
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<slot_range> out;
  for (std::size_t i = 0; i + 3 < words.size(); ++i) {
    long lo, hi, port;
    try {
      lo = std::stol(words[i]);
      hi = std::stol(words[i + 1]);
      if (words[i + 2].find('.') == std::string::npos) continue;
      port = std::stol(words[i + 3]);
    } catch (...) {
      continue;
    }
    for (int n = 0; n < 3; ++n)
      if (c.node(n).port() == port) out.push_back({lo, hi, n});
  }
  return out;
}

// Which node serves `slot`.
int node_of_slot(redis_cluster& c, int slot) {
  for (const auto& r : slot_map(c))
    if (slot >= r.lo && slot <= r.hi) return r.node;
  return -1;
}

// The keys of slot `slot` that node `n` holds.
std::vector<std::string> keys_in_slot(redis_cluster& c, int n, const std::string& slot) {
  std::istringstream in(c.node(n).cli({"CLUSTER", "GETKEYSINSLOT", slot, "1000"}));
  std::vector<std::string> keys;
  for (std::string k; std::getline(in, k);)
    if (!trim(k).empty()) keys.push_back(trim(k));
  return keys;
}

// Moves `keys` from node `from` to node `to` (of a slot set MIGRATING and
// IMPORTING), as `redis-cli --cluster reshard` does.
void migrate(redis_cluster& c, int from, int to, const std::vector<std::string>& keys) {
  if (keys.empty()) return;
  std::vector<std::string> args = {
      "MIGRATE", "127.0.0.1", std::to_string(c.node(to).port()), "", "0", "5000", "KEYS"};
  args.insert(args.end(), keys.begin(), keys.end());
  const std::string out = trim(c.node(from).cli(args));
  ASSERT_EQ(out, "OK") << "MIGRATE failed";
}

// How often the nodes answered TRYAGAIN (INFO errorstats).
long tryagains(redis_cluster& c) {
  const std::string field = "errorstat_TRYAGAIN:count=";
  long sum = 0;
  for (int n = 0; n < 3; ++n) {
    const std::string info = c.node(n).cli({"INFO", "errorstats"});
    const auto at = info.find(field);
    if (at != std::string::npos) sum += std::stol(info.substr(at + field.size()));
  }
  return sum;
}

// A semaphore name whose keys land on node `n`.
std::string name_on_node(redis_cluster& c, int n, const std::string& prefix) {
  for (int i = 0;; ++i) {
    const std::string name = prefix + "." + std::to_string(i);
    if (node_of_slot(c, key_slot("shmsem{" + name + "}")) == n) return name;
  }
}

TEST(RedisCluster, SemaphoresOnEveryNodeWorkThroughOneUrl) {
  redis_cluster c;
  std::vector<Semaphore> sems;
  std::vector<Permit> held;
  for (int n = 0; n < 3; ++n) {
    const std::string name = name_on_node(c, n, "spread");
    sems.push_back(Semaphore::open(c.url(name), 2));  // every URL names node 0
    held.push_back(sems.back().acquire(2));
    const std::string count = c.node(n).cli(
        {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(key_slot("shmsem{" + name + "}"))});
    EXPECT_GT(std::stol(trim(count)), 0) << "semaphore " << name << " is not on node " << n;
  }
  for (auto& s : sems) {
    EXPECT_EQ(s.used(), 2);
    EXPECT_FALSE(s.try_acquire().has_value());
  }
  held.clear();
  for (auto& s : sems) EXPECT_EQ(s.used(), 0);
}

TEST(RedisCluster, RedirectionsAreFollowedWhileASlotMigrates) {
  redis_cluster c;
  const std::string name = name_on_node(c, 1, "migrating");
  const std::string slot = std::to_string(key_slot("shmsem{" + name + "}"));
  auto s = Semaphore::open(c.url(name), 2);  // node 0 says MOVED
  const std::string from = trim(c.node(1).cli({"CLUSTER", "MYID"}));
  const std::string to = trim(c.node(2).cli({"CLUSTER", "MYID"}));
  // Mid-migration: node 1 still owns the slot and serves the keys it
  // holds; node 2 serves the keys that moved, only after ASKING.
  c.node(2).cli({"CLUSTER", "SETSLOT", slot, "IMPORTING", from});
  c.node(1).cli({"CLUSTER", "SETSLOT", slot, "MIGRATING", to});
  auto first = s.acquire();  // every key still on node 1
  EXPECT_EQ(s.used(), 1);
  migrate(c, 1, 2, keys_in_slot(c, 1, slot));
  {
    auto second = s.acquire();  // node 1 says ASK
    EXPECT_EQ(s.used(), 2);
    EXPECT_TRUE(keys_in_slot(c, 1, slot).empty());
  }
  first.release();
  EXPECT_EQ(s.used(), 0);
  // The migration ends: every node now sends the slot to node 2 (MOVED).
  for (int n = 0; n < 3; ++n) c.node(n).cli({"CLUSTER", "SETSLOT", slot, "NODE", to});
  auto p = s.acquire(2);
  EXPECT_EQ(s.used(), 2);
  EXPECT_FALSE(s.try_acquire().has_value());
  p.release();
  EXPECT_TRUE(s.wait_idle(1s));
}

// A semaphore is several keys, and a reshard moves them in batches: a
// script that ran while some were on each node used to end midway, keep its
// first writes and lose the rest (here: a release that freed the lease but
// left its seat counted for good). Every script now names every key, so
// Redis refuses it whole (ASK, TRYAGAIN) until the keys are together, and
// the client retries.
TEST(RedisCluster, AReleaseWhileTheSlotIsHalfMigratedKeepsTheSeatCount) {
  redis_cluster c;
  const std::string name = name_on_node(c, 1, "half-migrated");
  const std::string slot = std::to_string(key_slot("shmsem{" + name + "}"));
  Options o;
  o.connect_timeout = 20s;  // the release below waits out the migration
  auto s = Semaphore::open(c.url(name), 2, o);
  auto p = s.acquire();
  ASSERT_EQ(s.used(), 1);

  const std::string from = trim(c.node(1).cli({"CLUSTER", "MYID"}));
  const std::string to = trim(c.node(2).cli({"CLUSTER", "MYID"}));
  c.node(2).cli({"CLUSTER", "SETSLOT", slot, "IMPORTING", from});
  c.node(1).cli({"CLUSTER", "SETSLOT", slot, "MIGRATING", to});
  // The first batch: the keys that record which session owns what.
  std::vector<std::string> first, rest;
  for (const auto& k : keys_in_slot(c, 1, slot))
    (k.find(":own") != std::string::npos ? first : rest).push_back(k);
  ASSERT_FALSE(first.empty()) << "no ownership key in slot " << slot;
  ASSERT_FALSE(rest.empty());
  migrate(c, 1, 2, first);

  const long refused_before = tryagains(c);
  auto release = std::async(std::launch::async, [&] { p.release(); });
  // The migration goes on once the release has either finished or been
  // refused at least once (no sleep decides the order; the bound is generous).
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  while (release.wait_for(10ms) != std::future_status::ready && tryagains(c) == refused_before)
    ASSERT_LT(std::chrono::steady_clock::now(), give_up)
        << "the release neither ran nor was refused";
  migrate(c, 1, 2, rest);
  // The new owner first, as redis-cli does.
  for (int n : {2, 1, 0}) c.node(n).cli({"CLUSTER", "SETSLOT", slot, "NODE", to});

  try {
    release.get();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the release failed: " << e.what();
  }
  EXPECT_EQ(s.used(), static_cast<int>(s.holders().size()));
  EXPECT_EQ(s.used(), 0);
  auto both = s.try_acquire(2);
  EXPECT_TRUE(both.has_value()) << "a seat was lost for good";
}

// Moves slot `slot` from node `from` to node `to` as `redis-cli --cluster
// reshard` does: IMPORTING, MIGRATING, the keys in batches of 10, then
// the new owner on every node.
void move_slot(redis_cluster& c, const std::string& slot, int from, int to) {
  const std::string from_id = trim(c.node(from).cli({"CLUSTER", "MYID"}));
  const std::string to_id = trim(c.node(to).cli({"CLUSTER", "MYID"}));
  c.node(to).cli({"CLUSTER", "SETSLOT", slot, "IMPORTING", from_id});
  c.node(from).cli({"CLUSTER", "SETSLOT", slot, "MIGRATING", to_id});
  for (;;) {
    std::istringstream in(c.node(from).cli({"CLUSTER", "GETKEYSINSLOT", slot, "10"}));
    std::vector<std::string> batch;
    for (std::string k; std::getline(in, k);)
      if (!trim(k).empty()) batch.push_back(trim(k));
    if (batch.empty()) break;
    migrate(c, from, to, batch);
    if (::testing::Test::HasFatalFailure()) return;
  }
  c.node(to).cli({"CLUSTER", "SETSLOT", slot, "NODE", to_id});
  c.node(from).cli({"CLUSTER", "SETSLOT", slot, "NODE", to_id});
  c.node(3 - from - to).cli({"CLUSTER", "SETSLOT", slot, "NODE", to_id});
}

// Shared by the forked workers and the test: an anonymous shared mapping.
struct reshard_load {
  std::atomic<long> pairs{0};     // acquire + release pairs that succeeded
  std::atomic<long> failures{0};  // calls that threw
  std::atomic<int> inside{0};     // workers between acquire and release
  std::atomic<int> over{0};       // times the witness saw more than the capacity
  std::atomic<bool> stop{false};
};

// The slot of a semaphore in use, shared with other keys as any slot is,
// moves back and forth between two nodes while 3 processes x 2 threads
// acquire and release through a third. Nothing may fail, the bound must
// hold, and afterwards every seat is there again.
//
// `move_from_to(from, to)` moves the semaphore's slot, which node 1 owns at first.
void reshard_under_load(redis_cluster& c, const std::string& name, int moves,
                        const std::function<void(int, int)>& move_from_to) {
  constexpr int kCapacity = 2;
  std::vector<std::string> mset = {"MSET"};
  for (int i = 0; i < 300; ++i)
    mset.insert(mset.end(), {"other{" + name + "}" + std::to_string(i), "x"});
  ASSERT_EQ(trim(c.node(1).cli(mset)), "OK");

  void* mem = ::mmap(nullptr, sizeof(reshard_load), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* load = new (mem) reshard_load();
  const std::string url = c.url(name);  // node 0, which owns neither end of the move
  // Threads of the library left by earlier tests in this process must be
  // parked before a fork (docs/testing.md, on fork).
  ASSERT_TRUE(eventually(test::other_threads_parked, 10s));
  std::vector<child_process> workers;
  for (int w = 0; w < 3; ++w)
    workers.emplace_back([&] {
      Options o;
      o.session_timeout = 3s;
      o.connect_timeout = 10s;
      auto sem = Semaphore::open(url, kCapacity, o);
      auto work = [&] {
        while (!load->stop.load()) {
          try {
            auto p = sem.acquire(1, {.wait_timeout = 10s});
            if (load->inside.fetch_add(1) + 1 > kCapacity) load->over.fetch_add(1);
            load->inside.fetch_sub(1);
            p.release();
            load->pairs.fetch_add(1);
          } catch (const std::exception& e) {
            if (load->failures.fetch_add(1) == 0) std::fprintf(stderr, "worker: %s\n", e.what());
          }
        }
      };
      std::thread other(work);
      work();
      other.join();
      return 0;
    });

  int owner = 1;
  for (int move = 0; move < moves && !::testing::Test::HasFatalFailure(); ++move) {
    // Each move starts under load: some pairs since the last one.
    const long before = load->pairs.load();
    ASSERT_TRUE(eventually([&] { return load->pairs.load() >= before + 20; }, 20s))
        << "the workers made no progress before move " << move;
    const int to = owner == 1 ? 2 : 1;
    move_from_to(owner, to);
    owner = to;
  }
  const long before = load->pairs.load();
  EXPECT_TRUE(eventually([&] { return load->pairs.load() >= before + 20; }, 20s));
  load->stop = true;
  for (auto& w : workers) EXPECT_EQ(w.wait(), 0);

  EXPECT_EQ(load->failures.load(), 0) << "calls failed while the slot moved";
  EXPECT_EQ(load->over.load(), 0) << "more holders than seats";
  auto s = Semaphore::open(url, kCapacity);
  int held = 0;
  for (const auto& h : s.holders()) held += h.weight;
  EXPECT_EQ(s.used(), held) << "seats counted with no lease behind them";
  // Every seat comes back: at once if every release went through, or once
  // the workers' sessions lapse if one did not.
  auto both = s.acquire(kCapacity, {.wait_timeout = 10s});
  EXPECT_EQ(s.used(), kCapacity);
  ::munmap(mem, sizeof(reshard_load));
}

TEST(RedisCluster, ReshardingTheSlotUnderLoadLosesNoSeat) {
  redis_cluster c;
  const std::string name = name_on_node(c, 1, "resharded");
  const std::string slot = std::to_string(key_slot("shmsem{" + name + "}"));
  reshard_under_load(c, name, 6, [&](int from, int to) { move_slot(c, slot, from, to); });
}

// The same with redis-cli itself. `--cluster reshard --cluster-slots 1`
// moves the lowest slot of the source, so the semaphore lives in node 1's
// lowest slot, which stays the lowest of whichever node has it.
TEST(RedisCluster, RedisCliReshardUnderLoadLosesNoSeat) {
  redis_cluster c;
  long lowest = 16384;
  for (const auto& r : slot_map(c))
    if (r.node == 1) lowest = std::min(lowest, r.lo);
  ASSERT_LT(lowest, 16384);
  std::string name;
  for (int i = 0; name.empty(); ++i)
    if (key_slot("shmsem{cli-resharded." + std::to_string(i) + "}") == lowest)
      name = "cli-resharded." + std::to_string(i);
  std::string ids[3];
  for (int n = 0; n < 3; ++n) ids[n] = trim(c.node(n).cli({"CLUSTER", "MYID"}));
  // Four moves: redis-cli takes seconds for each (it waits for the nodes
  // to agree on the new owner).
  reshard_under_load(c, name, 4, [&](int from, int to) {
    const std::string out = c.node(0).cli(
        {"--cluster", "reshard", "127.0.0.1:" + std::to_string(c.node(0).port()), "--cluster-from",
         ids[from], "--cluster-to", ids[to], "--cluster-slots", "1", "--cluster-yes"});
    EXPECT_EQ(node_of_slot(c, static_cast<int>(lowest)), to) << "redis-cli did not move the slot:\n"
                                                             << out;
  });
}

}  // namespace
}  // namespace shmsem
