// Redis-backed semaphores on a local three-master cluster: semaphores on
// every node through one URL, and the MOVED and ASK redirections of a slot
// being migrated while it is used. (The behavioural suite also runs on a
// cluster: the redis-cluster entries of tests/unit.)
#include <gtest/gtest.h>
#include <shmsem/shmsem.hpp>

#include <set>
#include <sstream>

#include "redis/hash.hpp"
#include "redis_server.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using detail::redis::key_slot;
using test::redis_cluster;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// Which node serves `slot`: the one whose CLUSTER COUNTKEYSINSLOT would
// not redirect. Each node knows the map; ask the first.
int node_of_slot(redis_cluster& c, int slot) {
  std::istringstream in(c.node(0).cli({"CLUSTER", "SLOTS"}));
  // redis-cli prints the nested reply flat: start, end, ip, port, id, ...
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
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
    if (slot < lo || slot > hi) continue;
    for (int n = 0; n < 3; ++n)
      if (c.node(n).port() == port) return n;
  }
  return -1;
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
  const std::string from = trim(c.node(1).cli({"CLUSTER", "MYID"}));
  const std::string to = trim(c.node(2).cli({"CLUSTER", "MYID"}));
  // Mid-migration: node 1 still owns the slot, but new keys go to node 2,
  // which answers only after ASKING.
  c.node(2).cli({"CLUSTER", "SETSLOT", slot, "IMPORTING", from});
  c.node(1).cli({"CLUSTER", "SETSLOT", slot, "MIGRATING", to});
  auto s = Semaphore::open(c.url(name), 2);  // node 0 says MOVED, node 1 says ASK
  {
    auto p = s.acquire();
    EXPECT_EQ(s.used(), 1);
    EXPECT_GT(std::stol(trim(c.node(2).cli({"CLUSTER", "COUNTKEYSINSLOT", slot}))), 0)
        << "the semaphore was not created on the importing node";
  }
  EXPECT_EQ(s.used(), 0);
  // The migration ends: every node now sends the slot to node 2 (MOVED).
  for (int n = 0; n < 3; ++n) c.node(n).cli({"CLUSTER", "SETSLOT", slot, "NODE", to});
  auto p = s.acquire(2);
  EXPECT_EQ(s.used(), 2);
  EXPECT_FALSE(s.try_acquire().has_value());
  p.release();
  EXPECT_TRUE(s.wait_idle(1s));
}

}  // namespace
}  // namespace shmsem
