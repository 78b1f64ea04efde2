// redis/client.cpp: talking to one Redis deployment: pooling, cluster
// routing and scripts (see client.hpp).

#include "redis/client.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <map>
#include <random>
#include <thread>

#include "redis/hash.hpp"
#include "sys/clock.hpp"
#include "sys/proc.hpp"

namespace shmsem::detail::redis {

namespace {

constexpr std::uint16_t kNoNode = 0xffff;
constexpr std::size_t kMaxIdlePerNode = 16;
constexpr int kMaxRedirects = 16;

std::atomic<std::uint64_t> fork_gen{0};

struct registry {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<client>> clients;
};

// Never destroyed, and replaced (not cleaned) in a forked child: the old
// one's mutex may be held by a thread that does not exist there.
registry* the_registry = nullptr;
std::once_flag registry_once;

registry& get_registry() {
  std::call_once(registry_once, [] {
    the_registry = new registry;
    ::pthread_atfork(nullptr, nullptr, [] {
      fork_gen.fetch_add(1);
      the_registry = new registry;
    });
  });
  return *the_registry;
}

// "host:port" of a MOVED/ASK reply or a CLUSTER SLOTS entry.
endpoint node_endpoint(const endpoint& seed, std::string_view host_port) {
  endpoint ep;
  ep.user = seed.user;
  ep.password = seed.password;
  const auto colon = host_port.rfind(':');
  ep.host = std::string(host_port.substr(0, colon));
  if (ep.host.size() > 1 && ep.host.front() == '[') ep.host = ep.host.substr(1, ep.host.size() - 2);
  int port = 0;
  if (colon != std::string_view::npos)
    std::from_chars(host_port.data() + colon + 1, host_port.data() + host_port.size(), port);
  ep.port = port;
  return ep;
}

std::string host_port_of(const endpoint& ep) {
  return ep.host + ":" + std::to_string(ep.port);
}

bool starts(std::string_view s, std::string_view word) {
  return s.size() >= word.size() && s.substr(0, word.size()) == word &&
         (s.size() == word.size() || s[word.size()] == ' ');
}

}  // namespace

std::uint64_t fork_generation() noexcept {
  return fork_gen.load(std::memory_order_relaxed);
}

std::string random_id(int hex_digits) {
  get_registry();  // so that fork_gen counts forks
  // A child inherits the generator's state with the thread that forked:
  // reseed in each new process.
  // On the heap: 2.5 KB of generator in the library's TLS block would make
  // dlopen() of the library fail (tests/c/static_tls.sh).
  static thread_local std::unique_ptr<std::mt19937_64> rng;
  static thread_local std::uint64_t seeded = ~std::uint64_t{0};
  if (!rng) rng = std::make_unique<std::mt19937_64>();
  if (seeded != fork_generation()) {
    std::random_device dev;
    rng->seed((std::uint64_t{dev()} << 32) ^ dev() ^ static_cast<std::uint64_t>(sys::self_pid()));
    seeded = fork_generation();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(static_cast<std::size_t>(hex_digits));
  while (static_cast<int>(s.size()) < hex_digits) {
    std::uint64_t v = (*rng)();
    for (int k = 0; k < 16 && static_cast<int>(s.size()) < hex_digits; ++k, v >>= 4)
      s += kHex[v & 15];
  }
  return s;
}

std::shared_ptr<client> client::get(const endpoint& ep) {
  registry& r = get_registry();
  std::lock_guard g(r.mu);
  auto& slot = r.clients[ep.identity()];
  if (auto c = slot.lock()) return c;
  auto c = std::make_shared<client>(ep);
  slot = c;
  return c;
}

class client::borrowed {
 public:
  borrowed(client& owner, std::size_t node, std::unique_ptr<connection> c, bool pooled)
      : owner_(owner), node_(node), c_(std::move(c)), pooled_(pooled) {}
  borrowed(borrowed&&) = default;
  ~borrowed() {
    if (!c_ || c_->broken()) return;
    std::lock_guard g(owner_.mu_);
    auto& idle = owner_.nodes_[node_].idle;
    if (idle.size() < kMaxIdlePerNode) idle.push_back(std::move(c_));
  }
  connection* operator->() { return c_.get(); }
  connection& operator*() { return *c_; }
  /// Taken from the pool (it may have died while idle), not opened now.
  bool pooled() const { return pooled_; }
  /// Drops the node's other idle connections: they died with this one.
  void drop_pool() {
    std::lock_guard g(owner_.mu_);
    owner_.nodes_[node_].idle.clear();
  }

 private:
  client& owner_;
  std::size_t node_;
  std::unique_ptr<connection> c_;
  bool pooled_;
};

client::borrowed client::borrow(std::size_t node_index, std::int64_t deadline_ns) {
  endpoint ep;
  {
    std::lock_guard g(mu_);
    if (nodes_.empty()) nodes_.push_back(node{seed_, {}});
    auto& idle = nodes_[node_index].idle;
    if (!idle.empty()) {
      auto c = std::move(idle.back());
      idle.pop_back();
      return borrowed(*this, node_index, std::move(c), true);
    }
    ep = nodes_[node_index].ep;
  }
  return borrowed(*this, node_index, connection::open(ep, deadline_ns), false);
}

std::size_t client::node_for_slot(int slot) {
  if (nodes_.empty()) nodes_.push_back(node{seed_, {}});
  if (slot < 0 || slot_node_.empty() || slot_node_[slot] == kNoNode) return 0;
  return slot_node_[slot];
}

std::size_t client::node_named(std::string_view host_port) {
  if (nodes_.empty()) nodes_.push_back(node{seed_, {}});
  const endpoint ep = node_endpoint(seed_, host_port);
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (!nodes_[i].ep.unix_socket && nodes_[i].ep.host == ep.host && nodes_[i].ep.port == ep.port)
      return i;
  nodes_.push_back(node{ep, {}});
  return nodes_.size() - 1;
}

void client::learn_slots(std::int64_t deadline_ns) {
  reply r;
  try {
    borrowed c = borrow(0, deadline_ns);
    r = c->run({"CLUSTER", "SLOTS"}, deadline_ns);
  } catch (const io_error&) {
    return;  // the MOVED replies will teach the map one slot at a time
  }
  if (!r.is_array()) return;
  std::lock_guard g(mu_);
  cluster_ = true;
  slot_node_.assign(16384, kNoNode);
  for (std::size_t i = 0; i < r.size(); ++i) {
    const reply range = r.at(i);
    const reply master = range.at(2);
    if (range.size() < 3 || master.size() < 2) continue;
    std::string host(master.at(0).str());
    if (host.empty()) host = seed_.host;
    const std::size_t n = node_named(host + ":" + std::to_string(master.at(1).integer()));
    const long long lo = std::clamp<long long>(range.at(0).integer(), 0, 16383);
    const long long hi = std::clamp<long long>(range.at(1).integer(), 0, 16383);
    for (long long s = lo; s <= hi; ++s) slot_node_[s] = static_cast<std::uint16_t>(n);
  }
}

template <class Send>
reply client::routed(const std::string& key, std::int64_t deadline_ns, Send&& send) {
  const int slot = key.empty() ? -1 : key_slot(key);
  std::size_t target;
  {
    std::lock_guard g(mu_);
    target = node_for_slot(slot);
  }
  bool asking = false;
  int redirects = 0;
  std::int64_t pause_ns = 5'000'000;
  for (;;) {
    reply r;
    for (int attempt = 0;; ++attempt) {
      borrowed c = borrow(target, deadline_ns);
      if (asking) c->append({"ASKING"});
      try {
        r = send(*c, asking);
        break;
      } catch (const io_error& e) {
        // An idle connection whose server restarted: the peer's socket is
        // gone, so the command was refused (EPIPE, or RST: ECONNRESET)
        // without being run. Run it once on a new connection. Any other
        // failure (no answer, EOF) may come after the command ran: it is
        // the caller's.
        const bool refused =
            e.code() == std::errc::broken_pipe || e.code() == std::errc::connection_reset;
        if (!c.pooled() || !refused || attempt > 0) throw;
        c.drop_pool();
      }
    }
    asking = false;
    if (!r.is_error()) return r;
    const std::string_view e = r.str();
    // A resharding or failover in progress, or a restarted server loading
    // its data: waits a little and starts again from the slot's owner,
    // within the deadline; false when the deadline allows no more.
    auto pause = [&] {
      if (deadline_ns - sys::precise_now_ns() <= pause_ns) return false;
      std::this_thread::sleep_for(std::chrono::nanoseconds(pause_ns));
      pause_ns = std::min<std::int64_t>(pause_ns * 2, 200'000'000);
      {
        std::lock_guard g(mu_);
        target = node_for_slot(slot);
      }
      redirects = 0;
      return true;
    };
    const bool moved = starts(e, "MOVED");
    const bool ask = starts(e, "ASK");
    if (moved || ask) {
      // Nodes can send the slot back and forth while a migration ends (one
      // has taken the slot, the other not yet): a loop is waited out.
      if (++redirects > kMaxRedirects) {
        if (pause()) continue;
        return r;
      }
      // "MOVED <slot> <host>:<port>"
      const auto last = e.rfind(' ');
      const std::string_view where = e.substr(last + 1);
      bool first_moved = false;
      {
        std::lock_guard g(mu_);
        const std::size_t n = node_named(where);
        if (moved) {
          first_moved = !cluster_;
          cluster_ = true;
          if (slot_node_.empty()) slot_node_.assign(16384, kNoNode);
          if (slot >= 0) slot_node_[slot] = static_cast<std::uint16_t>(n);
        }
        target = n;
      }
      if (first_moved) learn_slots(deadline_ns);
      asking = ask;
      continue;
    }
    // TRYAGAIN may come from the node an ASK named, which serves nobody
    // without ASKING: hence the new start from the slot's owner. A slot
    // mid-move refuses a script on several keys until they are together,
    // for as long as the move takes, so only the deadline bounds the retries.
    if (starts(e, "TRYAGAIN") || starts(e, "CLUSTERDOWN") || starts(e, "LOADING")) {
      if (pause()) continue;
      return r;
    }
    return r;
  }
}

reply client::eval(const script& s, const std::vector<std::string>& keys,
                   const std::vector<std::string>& args, std::int64_t deadline_ns) {
  const std::string numkeys = std::to_string(keys.size());
  std::vector<std::string_view> cmd;
  cmd.reserve(args.size() + keys.size() + 3);
  cmd.push_back("FCALL");
  cmd.push_back(s.function());
  cmd.push_back(numkeys);
  for (const auto& k : keys) cmd.push_back(k);
  for (const auto& a : args) cmd.push_back(a);
  return routed(keys.front(), deadline_ns, [&](connection& c, bool asking) {
    c.append(cmd);
    if (asking) c.read(deadline_ns);  // ASKING's +OK
    reply r = c.read(deadline_ns);
    if (r.is_error() && starts(r.str(), "ERR Function not found")) {
      // Not loaded on this node (new node, restart without persistence,
      // FUNCTION FLUSH): load this version's library once, then call again.
      // REPLACE: another process may load the same library meanwhile.
      c.append({"FUNCTION", "LOAD", "REPLACE", s.lib().code()});
      reply loaded = c.read(deadline_ns);
      if (loaded.is_error()) return loaded;
      if (asking) c.append({"ASKING"});
      c.append(cmd);
      if (asking) c.read(deadline_ns);
      r = c.read(deadline_ns);
    }
    return r;
  });
}

reply client::command(const std::string& key, const std::vector<std::string_view>& args,
                      std::int64_t deadline_ns) {
  return routed(key, deadline_ns, [&](connection& c, bool asking) {
    c.append(args);
    if (asking) c.read(deadline_ns);
    return c.read(deadline_ns);
  });
}

reply client::command_on(const endpoint& where, const std::vector<std::string_view>& args,
                         std::int64_t deadline_ns) {
  std::size_t n = 0;
  {
    std::lock_guard g(mu_);
    if (nodes_.empty()) nodes_.push_back(node{seed_, {}});
    if (!(where.unix_socket == seed_.unix_socket && where.host == seed_.host &&
          where.port == seed_.port && where.path == seed_.path))
      n = node_named(host_port_of(where));
  }
  borrowed c = borrow(n, deadline_ns);
  return c->run(args, deadline_ns);
}

std::vector<endpoint> client::masters(std::int64_t deadline_ns) {
  reply r = command_on(seed_, {"CLUSTER", "SLOTS"}, deadline_ns);
  if (!r.is_array()) return {seed_};  // "cluster support disabled": a standalone server
  std::vector<endpoint> out;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const reply master = r.at(i).at(2);
    if (master.size() < 2) continue;
    std::string host(master.at(0).str());
    if (host.empty()) host = seed_.host;
    endpoint ep = node_endpoint(seed_, host + ":" + std::to_string(master.at(1).integer()));
    if (std::none_of(out.begin(), out.end(),
                     [&](const endpoint& o) { return o.host == ep.host && o.port == ep.port; }))
      out.push_back(ep);
  }
  if (out.empty()) out.push_back(seed_);
  return out;
}

}  // namespace shmsem::detail::redis
