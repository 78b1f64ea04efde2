#include "redis_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace shmsem::test {

namespace {

using namespace std::chrono_literals;

// Test keys are made of characters that need no escape in a URL.
std::string plain_key(std::string_view key) {
  for (unsigned char c : key)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-')
      throw std::invalid_argument("test key '" + std::string(key) + "' needs escaping in a URL");
  return std::string(key);
}

// execvp's argument array over `argv`, made before a fork: the child of a
// threaded process (the library's threads, a test's own) must not
// allocate, since another thread may have held the allocator's lock at the
// fork (it hung under ASan).
std::vector<char*> exec_args(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  return args;
}

// Runs argv, returns its standard output (and its exit status in *status).
std::string capture(const std::vector<std::string>& argv, int* status = nullptr) {
  const std::vector<char*> args = exec_args(argv);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return out;
}

// One PING over a fresh socket: true once the server answers anything.
bool answers(const std::string& socket_path, int port) {
  int fd;
  if (!socket_path.empty()) {
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, socket_path.c_str(), sizeof a.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return false;
    }
  } else {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return false;
    }
  }
  const char ping[] = "PING\r\n";
  bool ok = ::write(fd, ping, sizeof ping - 1) == sizeof ping - 1;
  pollfd p{fd, POLLIN, 0};
  char c = 0;
  ok = ok && ::poll(&p, 1, 2000) == 1 && ::read(fd, &c, 1) == 1 && c != '-';
  // "-LOADING" means not yet; "-NOAUTH" means up (with a password).
  if (!ok && c == '-') {
    char rest[16] = {};
    const ssize_t n = ::read(fd, rest, sizeof rest - 1);
    ok = n > 0 && std::string_view(rest).starts_with("NOAUTH");
  }
  ::close(fd);
  return ok;
}

}  // namespace

int free_port(bool bus_too) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    const int port = ntohs(a.sin_port);
    if (!bus_too) return port;
    if (port + 10000 > 65535) continue;
    const int bus = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    a.sin_port = htons(static_cast<std::uint16_t>(port + 10000));
    const bool free = ::bind(bus, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(bus);
    if (free) return port;
  }
  throw std::runtime_error("no free TCP port");
}

redis_server::redis_server(redis_options o) : o_(std::move(o)), owner_(::getpid()) {
  char tmpl[] = "/tmp/shmsem-redis.XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  if (!o_.tcp && !o_.cluster_node) socket_ = dir_ + "/redis.sock";
  start();
}

redis_server::~redis_server() {
  if (::getpid() != owner_) return;  // a forked child's copy
  if (pid_ > 0) {
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void redis_server::start() {
  for (int attempt = 0; attempt < 10; ++attempt) {
    const bool tcp = socket_.empty();
    if (tcp && (port_ == 0 || attempt > 0)) port_ = free_port(o_.cluster_node);
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     std::to_string(tcp ? port_ : 0),
                                     "--bind",
                                     "127.0.0.1",
                                     "--dir",
                                     dir_,
                                     "--save",
                                     "",
                                     "--daemonize",
                                     "no",
                                     "--logfile",
                                     dir_ + "/redis.log",
                                     "--appendonly",
                                     o_.persistence ? "yes" : "no"};
    if (o_.persistence) {
      args.insert(args.end(), {"--appendfsync", "always", "--appendfilename", "test.aof"});
    }
    if (!tcp) args.insert(args.end(), {"--unixsocket", socket_, "--unixsocketperm", "700"});
    if (!o_.password.empty()) args.insert(args.end(), {"--requirepass", o_.password});
    if (o_.cluster_node)
      args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file",
                               dir_ + "/nodes.conf", "--cluster-node-timeout", "5000"});
    args.insert(args.end(), o_.extra.begin(), o_.extra.end());
    const std::vector<char*> argv = exec_args(args);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // Dies with the test (if the thread that started it is the main one).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < until) {
      int st;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        break;  // it exited: port taken? try another
      }
      if (answers(socket_, port_)) return;
      std::this_thread::sleep_for(5ms);
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (!tcp) break;
  }
  throw std::runtime_error("redis-server did not start in " + dir_ + " (see redis.log there)");
}

void redis_server::signal(int sig) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  if (sig == SIGKILL) {
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

void redis_server::restart() {
  signal(SIGKILL);
  // The same socket path or port: clients reconnect to the same address.
  if (!socket_.empty()) ::unlink(socket_.c_str());
  const int port = port_;
  start();
  if (socket_.empty() && port_ != port)
    throw std::runtime_error("redis-server restarted on port " + std::to_string(port_) +
                             " instead of " + std::to_string(port));
}

std::string redis_server::cli(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"redis-cli"};
  if (!socket_.empty())
    argv.insert(argv.end(), {"-s", socket_});
  else
    argv.insert(argv.end(), {"-h", "127.0.0.1", "-p", std::to_string(port_)});
  if (!o_.password.empty()) argv.insert(argv.end(), {"-a", o_.password, "--no-auth-warning"});
  argv.insert(argv.end(), args.begin(), args.end());
  return capture(argv);
}

std::map<std::string, long long> redis_server::command_calls() const {
  std::map<std::string, long long> out;
  const std::string text = cli({"INFO", "commandstats"});
  std::size_t pos = 0;
  while ((pos = text.find("cmdstat_", pos)) != std::string::npos) {
    const auto colon = text.find(':', pos);
    const auto calls = text.find("calls=", colon);
    if (colon == std::string::npos || calls == std::string::npos) break;
    out[text.substr(pos + 8, colon - pos - 8)] = std::stoll(text.substr(calls + 6));
    pos = colon;
  }
  return out;
}

std::string redis_server::url(std::string_view key) const {
  const std::string auth = o_.password.empty() ? "" : ":" + plain_key(o_.password) + "@";
  if (!socket_.empty()) return "redis+unix://" + auth + socket_ + "?key=" + plain_key(key);
  return "redis://" + auth + "127.0.0.1:" + std::to_string(port_) + "/" + plain_key(key);
}

std::string redis_server::server_url() const {
  if (!socket_.empty()) return "redis+unix://" + socket_;
  return "redis://127.0.0.1:" + std::to_string(port_);
}

redis_cluster::redis_cluster() {
  for (int i = 0; i < 3; ++i)
    nodes_.push_back(std::make_unique<redis_server>([] {
      redis_options o;
      o.tcp = true;
      o.cluster_node = true;
      return o;
    }()));
  std::vector<std::string> create = {"redis-cli", "--cluster", "create"};
  for (auto& n : nodes_) create.push_back("127.0.0.1:" + std::to_string(n->port()));
  create.push_back("--cluster-yes");
  int status = 0;
  const std::string out = capture(create, &status);
  if (status != 0) throw std::runtime_error("redis-cli --cluster create failed: " + out);
  // Every node must agree that all slots are served before tests start.
  const auto until = std::chrono::steady_clock::now() + 60s;
  for (auto& n : nodes_) {
    while (n->cli({"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos) {
      if (std::chrono::steady_clock::now() > until)
        throw std::runtime_error("the test cluster did not become ready");
      std::this_thread::sleep_for(20ms);
    }
  }
}

std::string redis_cluster::url(std::string_view key) const {
  return nodes_[0]->url(key);
}

std::string redis_cluster::server_url() const {
  return nodes_[0]->server_url();
}

}  // namespace shmsem::test
