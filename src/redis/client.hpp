// redis/client.hpp: the process's way to one Redis deployment (a server or
// a cluster): pooled connections, cluster routing that follows MOVED and
// ASK, and Lua functions run by FCALL, their library loaded on each node
// that does not have it yet.
//
// One client per server URL (address, database and login) per process,
// shared by every semaphore on it and safe to use from many threads: each
// call borrows a connection of the right node from a pool, or opens one.
// Every call has a deadline; a call that cannot finish by it throws
// io_error, and nothing ever blocks past it.
//
// Cluster: hiredis 0.14 does not speak Cluster, so the client keeps its own
// slot map. It starts empty (everything goes to the URL's node), learns a
// slot from each MOVED, and reloads the whole map with CLUSTER SLOTS after
// the first one. ASK is served once on the named node after ASKING, without
// changing the map, as the specification asks. A standalone server never
// redirects, so the same code serves both.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "redis/connection.hpp"
#include "redis/url.hpp"

namespace shmsem::detail::redis {

/// A library of Lua functions (FUNCTION LOAD, Redis 7): its code runs once
/// per server, not at every call as an EVAL script's would.
class library {
 public:
  library(std::string name, std::string code) : name_(std::move(name)), code_(std::move(code)) {}
  const std::string& name() const noexcept { return name_; }
  /// The whole text FUNCTION LOAD takes, "#!lua name=..." first.
  const std::string& code() const noexcept { return code_; }

 private:
  std::string name_;
  std::string code_;
};

/// One function of a library, run with FCALL.
class script {
 public:
  script(const library& lib, std::string function) : lib_(lib), function_(std::move(function)) {}
  const library& lib() const noexcept { return lib_; }
  const std::string& function() const noexcept { return function_; }

 private:
  const library& lib_;
  std::string function_;
};

class client {
 public:
  /// The process's client for `ep`, made on first use. A forked child gets
  /// its own (the parent's connections are never used after fork()).
  static std::shared_ptr<client> get(const endpoint& ep);

  explicit client(const endpoint& seed) : seed_(seed) {}
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Runs `s` with `keys` (of one slot; keys[0] routes) and `args` on the
  /// node that serves the slot, loading its library there first if the
  /// node lacks it. Error replies are returned (except redirections, a
  /// missing function, and TRYAGAIN, CLUSTERDOWN and LOADING while the
  /// deadline allows a retry); I/O failures throw io_error.
  reply eval(const script& s, const std::vector<std::string>& keys,
             const std::vector<std::string>& args, std::int64_t deadline_ns);
  /// Runs a command on the node that serves `key`'s slot.
  reply command(const std::string& key, const std::vector<std::string_view>& args,
                std::int64_t deadline_ns);
  /// Runs a command on one given node (for scans of every master).
  reply command_on(const endpoint& where, const std::vector<std::string_view>& args,
                   std::int64_t deadline_ns);
  /// The master nodes: the URL's server alone unless it is a cluster.
  std::vector<endpoint> masters(std::int64_t deadline_ns);

  const endpoint& seed() const noexcept { return seed_; }

 private:
  struct node {
    endpoint ep;
    std::vector<std::unique_ptr<connection>> idle;
  };
  // A connection borrowed from a node's pool, given back unless broken.
  class borrowed;

  borrowed borrow(std::size_t node_index, std::int64_t deadline_ns);
  std::size_t node_for_slot(int slot);
  std::size_t node_named(std::string_view host_port);  // adds it if new
  void learn_slots(std::int64_t deadline_ns);
  template <class Send>
  reply routed(const std::string& key, std::int64_t deadline_ns, Send&& send);

  const endpoint seed_;
  std::mutex mu_;                         // guards everything below
  std::vector<node> nodes_;               // nodes_[0] is the seed
  std::vector<std::uint16_t> slot_node_;  // empty until the first MOVED
  bool cluster_ = false;
};

/// Bumped in a forked child: objects made before the fork belong to the
/// parent and must not touch their sockets or locks.
std::uint64_t fork_generation() noexcept;

/// `hex_digits` random hex digits (session ids, epochs, request ids). A
/// forked child draws other numbers than its parent.
std::string random_id(int hex_digits);

}  // namespace shmsem::detail::redis
