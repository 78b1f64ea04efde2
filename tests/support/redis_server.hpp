// redis_server.hpp: private redis-server processes for tests (Debian's
// binary, never a system service): on a unix socket in a temporary folder
// or on a free TCP port, optionally with persistence, a password, or as a
// three-master cluster. Each is stopped (and its folder removed) when the
// object goes, and dies with the test process if that is killed.
//
// The semantics suite runs on Redis by setting SHMSEM_TEST_BACKEND=redis
// (or redis-cluster): unique_key then makes URLs on a server that the test
// process starts on first use. Free of gtest, so that the benchmarks start
// their server with it too.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shmsem::test {

struct redis_options {
  bool tcp = false;                // a free TCP port instead of a unix socket
  bool persistence = false;        // append-only file, fsync at every write
  std::string password;            // requirepass
  bool cluster_node = false;       // --cluster-enabled yes (TCP)
  std::vector<std::string> extra;  // more redis-server arguments
};

class redis_server {
 public:
  explicit redis_server(redis_options o = {});
  ~redis_server();
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  /// The URL of semaphore `key` on this server (percent-encodes the key).
  std::string url(std::string_view key) const;
  /// The server's URL without a key (for `shmsem ls` and semtop).
  std::string server_url() const;
  const std::string& dir() const { return dir_; }
  const std::string& socket_path() const { return socket_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

  /// Sends a signal (SIGSTOP, SIGCONT, ...). SIGKILL also waits for the
  /// process to be gone.
  void signal(int sig);
  /// SIGKILLs the server, then starts it again on the same address and
  /// folder (with persistence, it reloads its data).
  void restart();
  /// Runs redis-cli with `args` against this server; returns its output.
  std::string cli(const std::vector<std::string>& args) const;
  /// Calls of each command since the start or the last CONFIG RESETSTAT,
  /// from INFO commandstats (what scripts and functions run counts too).
  std::map<std::string, long long> command_calls() const;

 private:
  void start();
  redis_options o_;
  std::string dir_;
  std::string socket_;
  int port_ = 0;
  pid_t pid_ = -1;
  pid_t owner_ = -1;  // the test process (a forked child never stops it)
};

/// Three cluster masters and the cluster made of them.
class redis_cluster {
 public:
  redis_cluster();
  /// The URL of semaphore `key`, naming the first node (the client follows
  /// redirections to the others).
  std::string url(std::string_view key) const;
  std::string server_url() const;
  redis_server& node(int i) { return *nodes_[i]; }

 private:
  std::vector<std::unique_ptr<redis_server>> nodes_;
};

/// A free TCP port on 127.0.0.1 (and, if `bus_too`, port + 10000 as well).
int free_port(bool bus_too = false);

/// `key` as a URL of the suite's backend: on the suite's server (started
/// on first use), or fake://KEY; empty on shared memory.
std::string backend_url(std::string_view key);

}  // namespace shmsem::test
