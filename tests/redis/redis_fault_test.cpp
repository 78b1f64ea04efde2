// The Redis backend when things go wrong, each against a private
// redis-server: bad URLs, wrong passwords, a server that is not Redis, keys
// that hold something else, a server killed and restarted with and without
// persistence, a stopped server, and a stopped or killed holder.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <shmsem/logging.hpp>
#include <shmsem/shmsem.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "redis_server.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::child_process;
using test::eventually;
using test::pipe_channel;
using test::redis_options;
using test::redis_server;
using clk = std::chrono::steady_clock;

std::string test_key() {
  std::string n = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return "fault." + n;
}

// What `f` threw (of type E), failing the test if it threw nothing.
template <class E = std::exception, class F>
E thrown(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e;
  }
  ADD_FAILURE() << "no exception";
  if constexpr (std::is_same_v<E, AcquisitionError>)
    return AcquisitionError(Reason::error, "none");
  else
    return E("none");
}

template <class F>
std::string message_of(F&& f) {
  return thrown<std::runtime_error>(std::forward<F>(f)).what();
}

AcquisitionError acquire_error(Semaphore& s, int n, const AcquireOptions& o = {}) {
  return thrown<AcquisitionError>([&] { s.acquire(n, o); });
}

struct counting_observer : Observer {
  std::atomic<int> lost{0};
  void on_lost(std::string_view, std::uint64_t, std::string_view) override { ++lost; }
};

// ------------------------------------------------------------- bad input

TEST(RedisFault, BadUrlsAreInvalidArgumentsThatNameTheUrlButNotThePassword) {
  for (const char* url :
       {"redis://", "redis:///k", "redis://h:0/k", "redis://h:70000/k", "redis://h:x/k",
        "redis://h", "redis://h/", "redis://h/k?db=x", "redis://h/k?foo=1", "redis://h/k?key=x",
        "redis://h/k?db=1&db=2", "redis+unix://relative?key=k", "redis+unix:///tmp/s",
        "redis+unix:///tmp/s?key=", "redis://h/a%00b", "redis://h/a%zz", "redis://[::1/k",
        "redis://u:secret@h:99999/x", "redis+unix://u:secret@/tmp/s"}) {
    SCOPED_TRACE(url);
    try {
      Semaphore::open(url, 1);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("Redis URL"), std::string::npos) << what;
      EXPECT_EQ(what.find("secret"), std::string::npos) << what;
    }
  }
}

TEST(RedisFault, TheSchemeIsCaseInsensitive) {
  redis_server unix_srv;
  redis_server tcp_srv({.tcp = true});
  const std::string unix_url = unix_srv.url(test_key());
  const std::string tcp_url = tcp_srv.url(test_key());
  ASSERT_TRUE(unix_url.starts_with("redis+unix://"));
  ASSERT_TRUE(tcp_url.starts_with("redis://"));
  for (const auto& [url, other] : {std::pair{unix_url, "Redis+Unix://" + unix_url.substr(13)},
                                   std::pair{tcp_url, "REDIS://" + tcp_url.substr(8)}}) {
    SCOPED_TRACE(other);
    auto s = Semaphore::open(url, 2);
    auto t = Semaphore::open(other, 2);
    auto p = t.acquire();
    EXPECT_EQ(s.used(), 1) << "the upper-case URL is not the same semaphore";
    EXPECT_THROW(Semaphore::segment_path(other), std::invalid_argument);
  }
}

TEST(RedisFault, AUrlOfASchemeShmsemCannotServeIsAClearErrorNotASharedMemoryKey) {
  for (const char* key : {"rediss://user:secret@cache.example:6380/jobs", "REDISS://h/k",
                          "http://example.com/x", "valkey+unix:///tmp/s?key=k"}) {
    SCOPED_TRACE(key);
    const std::string k = key;
    const std::string scheme = k.substr(0, k.find("://"));
    for (auto call : {+[](const std::string& x) { Semaphore::open(x, 1); },
                      +[](const std::string& x) { Semaphore::attach(x); },
                      +[](const std::string& x) { Semaphore::segment_path(x); }}) {
      try {
        call(k);
        ADD_FAILURE() << "accepted as a key";
      } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(scheme + "://"), std::string::npos) << what;
        EXPECT_EQ(what.find("secret"), std::string::npos) << what;
      }
    }
  }
  const auto here = Semaphore::list();
  EXPECT_TRUE(std::none_of(here.begin(), here.end(), [](const std::string& k) {
    return k.find("://") != k.npos;
  })) << "a URL became a shared-memory segment";
}

TEST(RedisFault, UnreachableServerFailsFastWithTheDriversMessage) {
  const int port = test::free_port();  // nobody listens there
  const std::string url = "redis://127.0.0.1:" + std::to_string(port) + "/k";
  const auto start = clk::now();
  try {
    Semaphore::open(url, 1, {.connect_timeout = 500ms});
    FAIL() << "opened";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), std::errc::connection_refused) << e.what();
    EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
  }
  EXPECT_LT(clk::now() - start, 5s);
  // A socket path that does not exist.
  EXPECT_THROW(Semaphore::open("redis+unix:///nonexistent/redis.sock?key=k", 1), SegmentError);
}

TEST(RedisFault, WrongOrMissingPasswordIsAClearErrorAndTheRightOneWorks) {
  redis_server srv({.password = "right"});
  const std::string good = srv.url(test_key());
  const std::string bad = "redis+unix://:wrong@" + srv.socket_path() + "?key=k";
  const std::string none = "redis+unix://" + srv.socket_path() + "?key=k";
  for (const auto& url : {bad, none}) {
    SCOPED_TRACE(url);
    try {
      Semaphore::open(url, 1);
      ADD_FAILURE() << "opened";
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), std::errc::permission_denied) << e.what();
      EXPECT_EQ(std::string(e.what()).find("wrong"), std::string::npos) << "password shown";
    }
  }
  auto s = Semaphore::open(good, 2);
  auto p = s.acquire();
  EXPECT_EQ(s.used(), 1);
  EXPECT_EQ(s.key().find("right"), std::string_view::npos) << "key() shows the password";
}

// A TCP server on a free port that answers every connection with `reply`
// (or with nothing, holding the connection open), then with `filler` bytes
// as fast as the client takes them.
class fake_server {
 public:
  explicit fake_server(std::string reply, std::size_t filler = 0)
      : reply_(std::move(reply)), filler_(filler) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        if (!reply_.empty()) [[maybe_unused]]
          auto n = ::write(c, reply_.data(), reply_.size());
        const std::vector<char> chunk(std::min<std::size_t>(filler_, 1 << 20), 'x');
        for (std::size_t sent = 0; sent < filler_;) {
          const ssize_t n =
              ::send(c, chunk.data(), std::min(chunk.size(), filler_ - sent), MSG_NOSIGNAL);
          if (n <= 0) break;
          sent += static_cast<std::size_t>(n);
        }
        clients_.push_back(c);
      }
    });
  }
  ~fake_server() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    for (int c : clients_) ::close(c);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/k"; }

 private:
  std::string reply_;
  std::size_t filler_ = 0;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::vector<int> clients_;
};

// A proxy on a unix socket in front of a server's unix socket, one thread
// per direction of each connection. cut() black-holes every connection
// (bytes are read and dropped, nothing is closed), so that one client is
// cut off from a server that others still reach.
class proxy {
 public:
  proxy(const std::string& listen_path, std::string target)
      : path_(listen_path), target_(std::move(target)) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path_.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    accepter_ = std::thread([this] {
      for (;;) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        const int u = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un t{};
        t.sun_family = AF_UNIX;
        std::snprintf(t.sun_path, sizeof t.sun_path, "%s", target_.c_str());
        if (::connect(u, reinterpret_cast<sockaddr*>(&t), sizeof t) != 0) {
          ::close(c);
          ::close(u);
          continue;
        }
        std::lock_guard g(mu_);
        fds_.push_back(c);
        fds_.push_back(u);
        auto cut = cuts_.emplace_back(std::make_shared<std::atomic<bool>>(false));
        pumps_.emplace_back([this, c, u, cut] { pump(c, u, false, *cut); });
        pumps_.emplace_back([this, c, u, cut] { pump(u, c, true, *cut); });
      }
    });
  }
  ~proxy() {
    ::shutdown(fd_, SHUT_RDWR);
    accepter_.join();
    ::close(fd_);
    {
      std::lock_guard g(mu_);
      for (int f : fds_) ::shutdown(f, SHUT_RDWR);
    }
    for (auto& t : pumps_) t.join();
    for (int f : fds_) ::close(f);
  }
  std::string url(std::string_view key) const {
    return "redis+unix://" + path_ + "?key=" + std::string(key);
  }
  void cut() { cut_ = true; }
  /// Black-holes the connections open now; later ones pass.
  void cut_existing() {
    std::lock_guard g(mu_);
    for (auto& c : cuts_) *c = true;
  }
  /// From now on, the server's bytes reach clients one every `gap`.
  void trickle(std::chrono::milliseconds gap) { trickle_ms_ = static_cast<int>(gap.count()); }
  /// From now on, the server's bytes reach clients `lag` late: a far server.
  void lag(std::chrono::milliseconds lag) { lag_ms_ = static_cast<int>(lag.count()); }

 private:
  void pump(int from, int to, bool from_server, const std::atomic<bool>& cut) {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(from, buf, sizeof buf);
      if (n <= 0) return;
      if (cut_ || cut) continue;
      const int gap = from_server ? trickle_ms_.load() : 0;
      if (from_server && lag_ms_ > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(lag_ms_));
      for (ssize_t done = 0; done < n;) {
        const ssize_t chunk = gap > 0 ? 1 : n - done;
        if (gap > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap));
        if (::send(to, buf + done, static_cast<std::size_t>(chunk), MSG_NOSIGNAL) != chunk) return;
        done += chunk;
      }
    }
  }
  std::string path_, target_;
  int fd_ = -1;
  std::atomic<bool> cut_{false};
  std::atomic<int> trickle_ms_{0};
  std::atomic<int> lag_ms_{0};
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::shared_ptr<std::atomic<bool>>> cuts_;
  std::thread accepter_;
  std::vector<std::thread> pumps_;
};

TEST(RedisFault, ACutOffHoldersIsHeldIsFalseOnceAnotherProcessCanHaveItsSeat) {
  redis_server srv;
  proxy px(srv.dir() + "/proxy.sock", srv.socket_path());
  constexpr auto kSession = 8000ms;
  auto cut_off = Semaphore::open(px.url(test_key()), 1,
                                 {.session_timeout = kSession, .connect_timeout = 100ms});
  auto other = Semaphore::open(srv.url(test_key()), 1, {.session_timeout = kSession});
  const auto granted = clk::now();
  auto p = cut_off.acquire();
  // A busy holder: calls made soon after the one that set the session's
  // deadline on the server (within a tenth of the timeout) need not move
  // it, but each is a contact with Redis.
  while (clk::now() - granted < kSession * 8 / 100) EXPECT_FALSE(cut_off.try_acquire());
  px.cut();
  // The other process takes the seat as soon as the server lets it.
  ASSERT_TRUE(eventually(
      [&] {
        other.reap();
        return other.used() == 0;
      },
      kSession * 2));
  auto q = other.acquire(1, {.wait_timeout = 5s});
  EXPECT_FALSE(p.is_held()) << "the cut-off holder believes it holds a seat another process has";
  EXPECT_GE(clk::now() - granted, kSession * 8 / 10) << "the seat was taken too early";
}

// Subscribers to the session channel of semaphore `key`'s one waiting
// process, as the server counts them (-1 if there is no such channel).
long long session_channel_subscribers(const redis_server& srv, const std::string& key) {
  std::string ch = srv.cli({"PUBSUB", "CHANNELS", "shmsem{" + key + "}:ev:*"});
  while (!ch.empty() && (ch.back() == '\n' || ch.back() == '\r')) ch.pop_back();
  if (ch.empty() || ch.find('\n') != std::string::npos) return -1;
  std::string out = srv.cli({"PUBSUB", "NUMSUB", ch});
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return std::atol(out.substr(out.rfind('\n') + 1).c_str());
}

TEST(RedisFault, ADeadPubSubConnectionIsNoticedAndReplaced) {
  redis_server srv;
  proxy px(srv.dir() + "/proxy.sock", srv.socket_path());
  const std::string key = test_key(), busy_key = test_key() + ".busy";
  constexpr auto kSession = 15s;  // renewals every 5 s: too late to hide a lost message
  // The direct handles get the long session too: this process's keeper
  // renews every session in turn, and each renewal through the black-holed
  // proxy waits for its deadline, which on a loaded host made a 3 s session
  // of the direct holders lapse (a fresh-clone make test saw it).
  auto holder = Semaphore::open(srv.url(key), 1, {.session_timeout = kSession});
  auto busy = Semaphore::open(srv.url(busy_key), 1, {.session_timeout = kSession});
  auto waiter = Semaphore::open(px.url(key), 1, {.session_timeout = kSession});
  auto busy_waiter = Semaphore::open(px.url(busy_key), 1, {.session_timeout = kSession});
  auto held = std::make_optional(holder.acquire());
  auto busy_held = busy.acquire();
  // Someone in the waiting process always waits, so its subscriber stays.
  auto stays = std::async(std::launch::async,
                          [&] { return busy_waiter.acquire(1, {.wait_timeout = 60s}).is_held(); });
  pipe_channel got, again;
  std::thread w([&] {
    {
      auto p = waiter.acquire(1, {.wait_timeout = 60s});
      got.send('1');
    }
    again.receive(std::chrono::minutes(2));
    auto p = waiter.acquire(1, {.wait_timeout = 60s});
    got.send('2');
  });
  ASSERT_TRUE(eventually([&] { return session_channel_subscribers(srv, key) == 1; }));
  px.cut_existing();  // the server still counts the black-holed subscriber
  held.reset();
  // The grant is lost on the way: the next renewal makes up for it, and
  // tells the process its subscriber missed a message.
  EXPECT_EQ(got.receive(std::chrono::seconds(30)), '1');
  held.emplace(holder.acquire(1, {.wait_timeout = 10s}));
  again.send();
  ASSERT_TRUE(eventually([&] { return holder.waiters() == 1; }));
  EXPECT_TRUE(eventually([&] { return session_channel_subscribers(srv, key) == 2; }))
      << "the dead subscriber was never replaced";
  const auto released = clk::now();
  held.reset();
  EXPECT_EQ(got.receive(std::chrono::seconds(30)), '2');
  EXPECT_LT(clk::now() - released, 2s) << "the handoff waited for a renewal";
  w.join();
  busy_held.release();
  EXPECT_TRUE(stays.get());
}

TEST(RedisFault, AServerThatIsNotRedisIsAClearErrorWithoutAHang) {
  fake_server http("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  const auto start = clk::now();
  try {
    Semaphore::open(http.url(), 1, {.connect_timeout = 1s});
    FAIL() << "opened";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), std::errc::protocol_error) << e.what();
    EXPECT_NE(std::string(e.what()).find("Redis server?"), std::string::npos) << e.what();
  }
  EXPECT_LT(clk::now() - start, 5s);
}

TEST(RedisFault, AServerThatNeverAnswersTimesOutAtTheConnectTimeout) {
  fake_server silent("");
  const auto start = clk::now();
  try {
    Semaphore::open(silent.url(), 1, {.connect_timeout = 300ms});
    FAIL() << "opened";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), std::errc::timed_out) << e.what();
  }
  const auto took = clk::now() - start;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 5s);
}

TEST(RedisFault, AReplyThatTricklesInEndsTheCallAtItsDeadline) {
  redis_server srv;
  proxy px(srv.dir() + "/proxy.sock", srv.socket_path());
  auto s = Semaphore::open(px.url(test_key()), 1, {.connect_timeout = 500ms});
  auto p = s.acquire();
  px.trickle(100ms);  // a script's reply is tens of bytes: seconds to arrive
  auto start = clk::now();
  const AcquisitionError e = acquire_error(s, 1, {.wait_timeout = 0ms});
  EXPECT_EQ(e.reason(), Reason::error) << e.what();
  EXPECT_NE(std::string(e.what()).find("in time"), std::string::npos) << e.what();
  EXPECT_LT(clk::now() - start, 2s) << "the call ran past its deadline";
  start = clk::now();
  EXPECT_THROW(p.release(), SegmentError);
  EXPECT_LT(clk::now() - start, 2s) << "release ran past its deadline";
}

std::int64_t thread_cpu_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

// A reply expected within a fraction of a millisecond is polled for
// without sleeping (connection.cpp); one from a server farther away must
// be slept for, or every call would burn a CPU for its whole round trip.
TEST(RedisFault, ACallerSleepsThroughTheRoundTripToAFarServer) {
  redis_server srv;
  proxy px(srv.dir() + "/proxy.sock", srv.socket_path());
  auto s = Semaphore::open(px.url(test_key()), 1, {.connect_timeout = 2s});
  auto p = s.acquire();
  px.lag(3ms);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(s.try_acquire());  // the client learns the lag
  const auto wall0 = clk::now();
  const std::int64_t cpu0 = thread_cpu_ns();
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(s.try_acquire());
  const double cpu = static_cast<double>(thread_cpu_ns() - cpu0);
  const double wall = static_cast<double>((clk::now() - wall0).count());
  EXPECT_GE(wall, 40 * 3e6) << "the proxy did not delay the replies";
  EXPECT_LT(cpu / wall, 0.25) << "the caller spun through its round trips";
}

// Peak resident memory of this process, in MiB.
long peak_rss_mib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

TEST(RedisFault, AHugeReplyIsRefusedWithoutBufferingItOrRunningPastTheDeadline) {
  // A peer that announces a 1 GiB string and then sends it as fast as it can.
  fake_server huge("$1073741824\r\n", std::size_t{1} << 30);
  const long before = peak_rss_mib();
  const auto start = clk::now();
  EXPECT_THROW(Semaphore::open(huge.url(), 1, {.connect_timeout = 1s}), SegmentError);
  EXPECT_LT(clk::now() - start, 3s);
#if defined(__SANITIZE_ADDRESS__)
  // ASan's allocator keeps freed buffers in quarantine, and hiredis grows
  // its buffer by doubling up to the 64 MiB cap: 384 MiB was seen there.
  // Without the cap the peak grew by over 1 GiB.
  constexpr long kBoundMiB = 700;
#else
  constexpr long kBoundMiB = 300;
#endif
  EXPECT_LT(peak_rss_mib() - before, kBoundMiB) << "MiB buffered for one reply";
}

TEST(RedisFault, KeysOfAnotherTypeOrGarbageAreReportedAndLeftAlone) {
  redis_server srv;
  struct foreign {
    std::string name;
    std::vector<std::string> write, read;
    std::string expect;
  };
  const std::vector<foreign> cases = {
      {"string", {"SET", "shmsem{string}", "hello"}, {"GET", "shmsem{string}"}, "hello"},
      {"garbage",
       {"HSET", "shmsem{garbage}", "format", "other"},
       {"HGET", "shmsem{garbage}", "format"},
       "other"},
      {"leases",
       {"LPUSH", "shmsem{leases}:leases", "mine"},
       {"LRANGE", "shmsem{leases}:leases", "0", "-1"},
       "mine"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    srv.cli(c.write);
    try {
      Semaphore::open(srv.url(c.name), 3);
      ADD_FAILURE() << "opened";
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), errc::bad_segment) << e.what();
      EXPECT_NE(std::string(e.what()).find("left alone"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("shmsem{" + c.name + "}"), std::string::npos)
          << e.what();
    }
    EXPECT_NE(srv.cli(c.read).find(c.expect), std::string::npos) << "overwritten";
    try {
      EXPECT_FALSE(Semaphore::remove(srv.url(c.name)));
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), errc::bad_segment) << e.what();
    }
    EXPECT_NE(srv.cli(c.read).find(c.expect), std::string::npos) << "removed";
  }
}

// A semaphore stored by an older shmsem (its keys are laid out otherwise)
// is refused by name and left as it is, never read as half a semaphore:
// the first format, the last one before the numbers were packed, and the
// last one with the histograms packed among them.
TEST(RedisFault, ASemaphoreInAnOlderFormatIsRefusedAndLeftAlone) {
  redis_server srv;
  for (const std::string format : {"shmsem-redis/1", "shmsem-redis/3", "shmsem-redis/4"}) {
    SCOPED_TRACE(format);
    const std::string name = "old" + format.substr(format.size() - 1);
    const std::string meta = "shmsem{" + name + "}";
    srv.cli({"HSET", meta, "format", format, "epoch", "e", "cap", "2", "used", "1"});
    try {
      Semaphore::open(srv.url(name), 2);
      ADD_FAILURE() << "opened";
    } catch (const SegmentError& e) {
      EXPECT_EQ(e.code(), errc::bad_segment) << e.what();
      EXPECT_NE(std::string(e.what()).find("'" + format + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(meta), std::string::npos) << e.what();
    }
    EXPECT_EQ(srv.cli({"HGET", meta, "used"}), "1\n") << "overwritten";
  }
}

// ------------------------------------------------------------- restarts

TEST(RedisFault, RestartWithoutPersistenceReportsEveryPermitLostAtOnce) {
  redis_server srv;
  auto obs = std::make_shared<counting_observer>();
  auto s = Semaphore::open(srv.url(test_key()), 3, {.observer = obs});
  auto a = s.acquire();
  auto b = s.acquire(2);
  srv.restart();
  // Nobody asks: the session's renewal finds the semaphore gone.
  ASSERT_TRUE(eventually([&] { return obs->lost.load() == 2; }, 10s));
  EXPECT_FALSE(a.is_held());
  const std::string msg = message_of([&] { b.release(); });
  EXPECT_NE(msg.find("lost the semaphore's data"), std::string::npos) << msg;
  // The capacity comes back from open()'s permits.
  auto c = s.acquire(3, {.wait_timeout = 5s});
  EXPECT_EQ(s.capacity(), 3);
  EXPECT_THROW(a.release(), PermitNotHeldError);
  EXPECT_EQ(s.used(), 3);
}

TEST(RedisFault, RestartWithPersistenceWithinTheSessionTimeoutKeepsThePermits) {
  redis_server srv({.persistence = true});
  auto s = Semaphore::open(srv.url(test_key()), 2, {.session_timeout = 10s});
  auto p = s.acquire();
  const auto token = p.fencing_token();
  srv.restart();
  // Reconnects on its own; the lease, its session and its data are back.
  ASSERT_TRUE(eventually([&] { return s.used() == 1; }, 5s));
  EXPECT_TRUE(p.is_held());
  auto q = s.acquire();
  EXPECT_GT(q.fencing_token(), token);
  EXPECT_NO_THROW(p.release());
  EXPECT_NO_THROW(q.release());
  EXPECT_EQ(s.used(), 0);
}

TEST(RedisFault, RestartWithPersistenceAfterTheSessionTimeoutReportsTheLoss) {
  redis_server srv({.persistence = true});
  auto s = Semaphore::open(srv.url(test_key()), 1, {.session_timeout = 300ms});
  auto p = s.acquire();
  srv.signal(SIGKILL);
  // The outage outlasts the session: that is the fault under test.
  std::this_thread::sleep_for(1s);
  srv.restart();
  EXPECT_FALSE(p.is_held());
  const std::string msg = message_of([&] { p.release(); });
  EXPECT_NE(msg.find("session lapsed"), std::string::npos) << msg;
  auto q = s.acquire(1, {.wait_timeout = 5s});  // the seat came back
  EXPECT_TRUE(q.is_held());
}

// A restore from an older snapshot (or a failover to a replica that missed
// the last grants) forgets grants but must never hand out a token again.
TEST(RedisFault, RestartFromAnOlderSnapshotNeverRepeatsATokenAndReportsTheForgottenGrant) {
  redis_server srv;
  auto s = Semaphore::open(srv.url(test_key()), 3, {.session_timeout = 10s});
  auto kept = s.acquire();
  srv.cli({"SAVE"});  // the snapshot has `kept` only
  auto forgotten = s.acquire();
  const std::uint64_t newest = forgotten.fencing_token();
  srv.restart();  // loads the snapshot
  auto fresh = s.acquire(1, {.wait_timeout = 5s});
  EXPECT_GT(fresh.fencing_token(), newest);
  EXPECT_TRUE(kept.is_held());
  EXPECT_FALSE(forgotten.is_held());
  EXPECT_THROW(forgotten.release(), PermitNotHeldError);
  EXPECT_NO_THROW(kept.release());
}

TEST(RedisFault, StoppedServerFailsCallsWithinTheirBudgetAndIsUsedAgainAfterwards) {
  redis_server srv;
  auto s =
      Semaphore::open(srv.url(test_key()), 1, {.session_timeout = 10s, .connect_timeout = 300ms});
  auto p = s.acquire();
  // A waiter queued before the stop ends by its own budget.
  auto queued =
      std::async(std::launch::async, [&] { return acquire_error(s, 1, {.wait_timeout = 400ms}); });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  srv.signal(SIGSTOP);
  auto start = clk::now();
  const AcquisitionError waited = queued.get();
  EXPECT_EQ(waited.reason(), Reason::timeout) << waited.what();
  EXPECT_LT(clk::now() - start, 400ms + 300ms + 2s);
  // A call made during the stop fails with the driver's error.
  start = clk::now();
  const AcquisitionError e = acquire_error(s, 1, {.wait_timeout = 200ms});
  EXPECT_EQ(e.reason(), Reason::error) << e.what();
  EXPECT_NE(std::string(e.what()).find("cannot reach Redis"), std::string::npos) << e.what();
  EXPECT_LT(clk::now() - start, 200ms + 300ms + 2s);
  EXPECT_THROW(s.try_acquire(), AcquisitionError);
  EXPECT_THROW(s.reap(), SegmentError);
  EXPECT_TRUE(p.is_held()) << "within the session timeout, from what the process knows";
  srv.signal(SIGCONT);
  EXPECT_TRUE(p.is_held());
  p.release();
  auto q = s.acquire(1, {.wait_timeout = 5s});
  EXPECT_EQ(s.used(), 1);
  EXPECT_EQ(s.waiters(), 0) << "the waiter that gave up during the stop left the queue";
}

// A caller preempted between sending its request and reading the reply,
// for longer than its connect timeout, finds the reply waiting: it is read,
// not reported as "no answer in time" (a waiter stopped there would lose
// its place instead of starting over). ptrace holds the caller at the exit
// of the send(2) of its acquire, the worst instruction to lose the CPU at.
TEST(RedisFault, AReplyThatArrivedWhileTheCallerWasPreemptedIsReadAfterItsDeadline) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  pipe_channel ready, go;
  child_process caller([&] {
    auto s = Semaphore::open(url, 1, {.session_timeout = 30s, .connect_timeout = 300ms});
    // The server knows the scripts after this: the next acquire is one
    // EVALSHA, not a NOSCRIPT reply and an EVAL.
    s.acquire().release();
    ready.send('o');
    if (go.receive(std::chrono::minutes(5)) != 'g') return 2;
    try {
      auto p = s.acquire(1, {.wait_timeout = 10s});
      ready.send(p.is_held() ? 'p' : 'n');
    } catch (const std::exception& e) {
      std::fprintf(stderr, "acquire: %s\n", e.what());
      ready.send('e');
    }
    return 0;
  });
  ASSERT_EQ(ready.receive(), 'o');
  const pid_t pid = caller.pid();
  // TRACESYSGOOD: without it PTRACE_GET_SYSCALL_INFO cannot tell a
  // system call's entry from its exit.
  ASSERT_EQ(::ptrace(PTRACE_SEIZE, pid, nullptr, PTRACE_O_TRACESYSGOOD), 0) << std::strerror(errno);
  ASSERT_EQ(::ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr), 0) << std::strerror(errno);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, __WALL), pid);
  go.send('g');
  // Runs the caller from system call to system call until the exit of its
  // first sendto(2): the acquire's request is on its way.
  bool in_send = false;
  for (;;) {
    ASSERT_EQ(::ptrace(PTRACE_SYSCALL, pid, nullptr, nullptr), 0) << std::strerror(errno);
    ASSERT_EQ(::waitpid(pid, &st, __WALL), pid);
    ASSERT_TRUE(WIFSTOPPED(st)) << "the caller ended while traced: status " << st;
    __ptrace_syscall_info info{};
    if (::ptrace(PTRACE_GET_SYSCALL_INFO, pid, sizeof info, &info) <= 0) continue;
    if (info.op == PTRACE_SYSCALL_INFO_ENTRY) in_send = info.entry.nr == SYS_sendto;
    if (info.op == PTRACE_SYSCALL_INFO_EXIT && in_send) break;
  }
  // The server answers while the caller is held, and its deadline passes.
  auto s = Semaphore::open(url, 1);
  EXPECT_TRUE(eventually([&] { return s.used() == 1; })) << "the acquire never reached Redis";
  std::this_thread::sleep_for(600ms);  // twice the caller's connect timeout
  ASSERT_EQ(::ptrace(PTRACE_DETACH, pid, nullptr, nullptr), 0) << std::strerror(errno);
  EXPECT_EQ(ready.receive(), 'p') << "the reply that waited in the socket was not read";
  EXPECT_EQ(caller.wait(), 0);
}

TEST(RedisFault, AWaitRejectedByAResizeNamesTheCapacityThatRejectedIt) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  auto s = Semaphore::open(url, 5);
  auto held = s.acquire(3);
  pipe_channel said;
  // A fork while this process's keeper thread allocates would copy the
  // sanitizer allocator's lock held (docs/testing.md, on fork).
  ASSERT_TRUE(eventually([] { return shmsem::test::other_threads_parked(); }));
  child_process waiter([&] {
    auto sem = Semaphore::open(url, 5);
    try {
      sem.acquire(3, {.wait_timeout = 60s});
      said.send('p');
    } catch (const AcquisitionError& e) {
      const std::string what = e.what();
      said.send(e.reason() != Reason::exceeds_capacity            ? 'x'
                : what.find("capacity of 2") != std::string::npos ? 'y'
                                                                  : 'n');
    }
    return 0;
  });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  s.set_capacity(2);
  EXPECT_EQ(said.receive(), 'y') << "the message names another capacity than 2";
  EXPECT_EQ(waiter.wait(), 0);
}

TEST(RedisFault, AUserWithoutChannelAccessIsToldAtOpenAndItsReleasesAndHandoffsStillWork) {
  redis_server srv;
  // Redis 7's default for a new ACL user: no pub/sub channels.
  srv.cli({"ACL", "SETUSER", "nochannels", "on", ">pw", "~*", "+@all", "resetchannels"});
  std::string url = srv.url(test_key());
  url.insert(std::string_view("redis+unix://").size(), "nochannels:pw@");
  std::ostringstream logs;
  {
    auto l = std::make_shared<spdlog::logger>(
        "shmsem", std::make_shared<spdlog::sinks::ostream_sink_mt>(logs));
    l->set_level(spdlog::level::info);
    set_logger(l);
  }
  {
    auto s = Semaphore::open(url, 1, {.session_timeout = 600ms});
    auto p = s.acquire();
    auto waiting = std::async(std::launch::async, [&] {
      auto q = s.acquire(1, {.wait_timeout = 10s});
      return q.is_held();
    });
    ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
    EXPECT_NO_THROW(p.release()) << "a release that Redis recorded was reported as failed";
    EXPECT_TRUE(waiting.get()) << "the waiter never got the seat";
    EXPECT_EQ(s.used(), 0);
    EXPECT_EQ(s.stats().released, 2u);
  }
  set_logger(nullptr);
  const std::string text = logs.str();
  EXPECT_NE(text.find("channel"), std::string::npos) << text;
  EXPECT_NE(text.find("&shmsem{"), std::string::npos)
      << "the log does not say what to grant: " << text;
}

TEST(RedisFault, TheAclThatDocsRedisMdListsIsEnough) {
  redis_server srv;
  // As in docs/redis.md, "Requirements and limits".
  srv.cli(
      {"ACL",       "SETUSER",        "app",        "on",           ">pw",      "resetkeys",
       "~shmsem{*", "resetchannels",  "&shmsem{*",  "-@all",        "+ping",    "+select",
       "+fcall",    "+function|load", "+subscribe", "+unsubscribe", "+scan",    "+cluster|slots",
       "+asking",   "+time",          "+exists",    "+type",        "+del",     "+publish",
       "+hmget",    "+hset",          "+hget",      "+hdel",        "+hexists", "+hgetall",
       "+hincrby",  "+hlen",          "+zadd",      "+zrem",        "+zrange",  "+zrangebyscore",
       "+zscore"});
  std::string url = srv.url(test_key());
  url.insert(std::string_view("redis+unix://").size(), "app:pw@");
  auto s = Semaphore::open(url, 1, {.session_timeout = 600ms});
  auto p = s.acquire();
  auto waiting = std::async(std::launch::async, [&] {
    auto q = s.acquire(1, {.wait_timeout = 10s});
    q.extend(5s);
    return q.is_held();
  });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  p.release();
  EXPECT_TRUE(waiting.get());
  EXPECT_EQ(s.holders().size(), 0u);
  s.set_capacity(2);
  EXPECT_EQ(s.reap(), 0);
  EXPECT_EQ(s.force_release_all(), 0);
  EXPECT_EQ(Semaphore::list(srv.server_url().insert(13, "app:pw@")).size(), 1u);
  EXPECT_TRUE(Semaphore::remove(url));
}

// ------------------------------------------------------------- cost

TEST(RedisFault, AnUncontendedPairIsTwoFunctionCallsThatRunAtMostSixteenCommands) {
  // On a local server a pair's time is mostly the server's, and most of
  // that is what the Lua code runs: one FCALL each way (no per-call prelude
  // as with EVALSHA), and no command that the usual case does not need.
  redis_server srv;
  auto s = Semaphore::open(srv.url(test_key()), 2, {.session_timeout = 60s});
  s.acquire().release();  // the library loaded, the session's deadline set
  srv.cli({"CONFIG", "RESETSTAT"});
  constexpr int kPairs = 50;
  for (int i = 0; i < kPairs; ++i) s.acquire().release();
  long long fcalls = 0, evals = 0, inner = 0;
  for (const auto& [cmd, calls] : srv.command_calls()) {
    if (cmd == "fcall")
      fcalls += calls;
    else if (cmd == "eval" || cmd == "evalsha")
      evals += calls;
    else if (cmd.rfind("config", 0) != 0)
      inner += calls;
  }
  EXPECT_EQ(fcalls, 2 * kPairs);
  EXPECT_EQ(evals, 0);
  EXPECT_LE(inner, 16 * kPairs) << "commands run by the functions, per pair: "
                                << static_cast<double>(inner) / kPairs;
}

TEST(RedisFault, AServerThatForgotTheLibraryIsGivenItAgainWithinTheCall) {
  redis_server srv;
  auto s = Semaphore::open(srv.url(test_key()), 2);
  auto held = s.acquire();
  // As after a restart without persistence, or an operator's FUNCTION FLUSH.
  srv.cli({"FUNCTION", "FLUSH"});
  EXPECT_EQ(srv.cli({"FUNCTION", "LIST"}).find("shmsem_"), std::string::npos);
  EXPECT_NO_THROW(held.release());
  EXPECT_NE(srv.cli({"FUNCTION", "LIST"}).find("shmsem_"), std::string::npos);
  EXPECT_EQ(s.used(), 0);
  auto again = s.acquire(1, {.wait_timeout = 5s});
  EXPECT_EQ(s.used(), 1);
}

// ------------------------------------------------------------- holders

// A child that holds one seat of `url` until told, then reports whether it
// still held it and whether release() said it was lost.
struct remote_holder {
  pipe_channel ready, go;
  child_process proc;
  remote_holder(const std::string& url, std::chrono::milliseconds session)
      : proc([this, url, session] {
          auto sem = Semaphore::open(url, 1, {.session_timeout = session});
          auto p = sem.acquire();
          ready.send('h');
          go.receive(std::chrono::minutes(5));
          const bool held = p.is_held();
          bool lost = false;
          try {
            p.release();
          } catch (const PermitNotHeldError&) {
            lost = true;
          }
          ready.send(held ? 'y' : 'n');
          ready.send(lost ? 'l' : 'r');
          return 0;
        }) {
    EXPECT_EQ(ready.receive(), 'h');
  }
};

TEST(RedisFault, StoppedHolderLosesItsSeatAndLearnsItWhenResumed) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  remote_holder holder(url, 500ms);
  auto s = Semaphore::open(url, 1, {.session_timeout = 500ms});
  holder.proc.kill(SIGSTOP);
  auto p = s.acquire(1, {.wait_timeout = 10s});  // its session lapses: the seat is ours
  EXPECT_EQ(s.used(), 1) << "the bound held";
  const auto hs = s.holders();
  ASSERT_EQ(hs.size(), 1u);
  EXPECT_EQ(hs[0].pid, ::getpid());
  holder.proc.kill(SIGCONT);
  holder.go.send();
  EXPECT_EQ(holder.ready.receive(), 'n') << "is_held() after the lapse";
  EXPECT_EQ(holder.ready.receive(), 'l') << "release() must report the loss";
  EXPECT_EQ(holder.proc.wait(), 0);
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(s.used(), 1);
  EXPECT_GE(s.stats().reaped, 1u);
}

// A child that waits for one seat of `url` (capacity 1) and reports what
// acquire() did: 'p' with a permit (then whether is_held() agreed: 'y'/'n',
// and it releases when told), 'e' with an error. A `paused` one says 'w'
// once it is queued and its acquire() waits there (in on_wait_start) until
// told to go on; it says 'h' on `heard` when its keeper has heard a grant
// (from the library's debug log).
struct remote_waiter {
  // Sends 'h' at the first log line about a grant heard.
  struct heard_sink : spdlog::sinks::base_sink<std::mutex> {
    pipe_channel* out = nullptr;
    bool told = false;
    void sink_it_(const spdlog::details::log_msg& m) override {
      const std::string_view line(m.payload.data(), m.payload.size());
      if (!told && line.find("grant to wait") != line.npos) {
        told = true;
        out->send('h');
      }
    }
    void flush_() override {}
  };
  struct pausing_observer : Observer {
    pipe_channel* ready = nullptr;
    pipe_channel* go = nullptr;
    void on_wait_start(std::string_view, int) override {
      ready->send('w');
      go->receive(std::chrono::minutes(5));
    }
  };
  pipe_channel ready, go, heard;
  child_process proc;
  remote_waiter(const std::string& url, std::chrono::milliseconds session, bool paused = false)
      : proc([this, url, session, paused] {
          Options o{.session_timeout = session};
          if (paused) {
            auto sink = std::make_shared<heard_sink>();
            sink->out = &heard;
            auto l = std::make_shared<spdlog::logger>("shmsem", sink);
            l->set_level(spdlog::level::debug);
            set_logger(l);
            auto obs = std::make_shared<pausing_observer>();
            obs->ready = &ready;
            obs->go = &go;
            o.observer = obs;
          }
          auto sem = Semaphore::open(url, 1, o);
          try {
            auto p = sem.acquire(1, {.wait_timeout = 60s});
            ready.send('p');
            ready.send(p.is_held() ? 'y' : 'n');
            go.receive(std::chrono::minutes(5));
            p.release();
          } catch (const std::exception& e) {
            std::fprintf(stderr, "the waiter's acquire failed: %s\n", e.what());
            ready.send('e');
          }
          return 0;
        }) {}
  // Whether the child has said anything yet (without waiting).
  bool spoke() {
    pollfd p{ready.read_fd(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
};

// The end of a stopped waiter's story, once it was resumed: it queued
// again (its grant and place were lost) and gets nothing while `here` holds
// the only seat; once that is released, it gets the seat for real.
void expect_the_waiter_started_over(Semaphore& s, remote_waiter& waiter, Permit& here) {
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; })) << "the waiter did not start over";
  EXPECT_FALSE(waiter.spoke()) << "acquire() returned while the seat was held here";
  EXPECT_TRUE(here.is_held());
  EXPECT_EQ(s.used(), 1);
  here.release();
  EXPECT_EQ(waiter.ready.receive(), 'p');
  EXPECT_EQ(waiter.ready.receive(), 'y') << "the waiter's permit is not held in Redis";
  waiter.go.send();
  EXPECT_EQ(waiter.proc.wait(), 0);
  EXPECT_EQ(s.used(), 0);
}

TEST(RedisFault, WaiterStoppedPastItsSessionNeverComesBackAsAHolder) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  // Only the waiter's session may lapse here, even on a busy host.
  auto s = Semaphore::open(url, 1, {.session_timeout = 30s});
  auto held = s.acquire();
  // A fork while this process's keeper thread allocates would copy the
  // sanitizer allocator's lock held, and the child's keeper would never
  // start (docs/testing.md, on fork).
  ASSERT_TRUE(eventually([] { return shmsem::test::other_threads_parked(); }));
  remote_waiter waiter(url, 500ms);
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  waiter.proc.kill(SIGSTOP);
  // The stopped waiter's session lapses, and a reap ends its wait.
  ASSERT_TRUE(eventually([&] {
    s.reap();
    return s.waiters() == 0;
  }));
  waiter.proc.kill(SIGCONT);
  // It queues again (its place is lost), and gets nothing while we hold.
  expect_the_waiter_started_over(s, waiter, held);
}

TEST(RedisFault, GrantToAWaiterStoppedPastItsSessionIsNotReturnedAfterItWasReaped) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  // Only the waiter's session may lapse here, even on a busy host.
  auto s = Semaphore::open(url, 1, {.session_timeout = 30s});
  std::optional<Permit> held = s.acquire();
  // A fork while this process's keeper thread allocates would copy the
  // sanitizer allocator's lock held, and the child's keeper would never
  // start (docs/testing.md, on fork).
  ASSERT_TRUE(eventually([] { return shmsem::test::other_threads_parked(); }));
  remote_waiter waiter(url, 500ms);
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  waiter.proc.kill(SIGSTOP);
  // The stopped waiter is granted the seat (the grant waits on its socket),
  // then its session lapses and the seat comes back.
  held->release();
  held.reset();
  ASSERT_TRUE(eventually([&] {
    s.reap();
    return s.used() == 0;
  }));
  auto again = s.acquire(1, {.wait_timeout = 5s});
  waiter.proc.kill(SIGCONT);
  expect_the_waiter_started_over(s, waiter, again);
}

// The waiter's keeper hears its grant in time, then the process is stopped
// before acquire() returns, for longer than its session: the grant is
// reaped, and must not come back as a permit. Here the keeper renews the
// session (a new one) before acquire() looks at the grant, so the session's
// deadline alone would look fine by then.
TEST(RedisFault, GrantHeardJustBeforeTheWaiterWasStoppedPastItsSessionIsNotReturned) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  const std::vector<std::string> sessions = {"ZCARD", "shmsem{" + test_key() + "}:sessions"};
  // Only the waiter's session may lapse here.
  auto s = Semaphore::open(url, 1, {.session_timeout = 30s});
  std::optional<Permit> held = s.acquire();
  // A fork while this process's keeper thread allocates would copy the
  // sanitizer allocator's lock held, and the child's keeper would never
  // start (docs/testing.md, on fork).
  ASSERT_TRUE(eventually([] { return shmsem::test::other_threads_parked(); }));
  remote_waiter waiter(url, 500ms, true);
  ASSERT_EQ(waiter.ready.receive(), 'w') << "the waiter did not queue";
  held->release();
  held.reset();
  ASSERT_EQ(waiter.heard.receive(), 'h') << "the waiter's keeper did not hear its grant";
  waiter.proc.kill(SIGSTOP);
  // Its session lapses; the reap takes its seat back.
  ASSERT_TRUE(eventually([&] {
    s.reap();
    return s.used() == 0;
  }));
  auto again = s.acquire(1, {.wait_timeout = 5s});
  EXPECT_EQ(srv.cli(sessions), "2\n") << "the placeholder and this process's session";
  waiter.proc.kill(SIGCONT);
  ASSERT_TRUE(eventually([&] { return srv.cli(sessions) == "3\n"; }))
      << "the waiter's keeper did not renew";
  waiter.go.send();  // acquire() goes on, and finds the grant
  expect_the_waiter_started_over(s, waiter, again);
}

TEST(RedisFault, AShortSessionThatLapsesIsReapedEvenAfterALongerOneWasSetFirst) {
  // Scripts skip the search for lapsed sessions until the earliest deadline
  // they know of: a shorter session set later must bring that forward.
  redis_server srv;
  const std::string url = srv.url(test_key());
  auto s = Semaphore::open(url, 1, {.session_timeout = 60s});
  s.acquire().release();  // this process's 60 s deadline is the earliest known
  // A fork while this process's keeper thread allocates would copy the
  // sanitizer allocator's lock held, and the child's keeper would never
  // start (docs/testing.md, on fork).
  ASSERT_TRUE(eventually([] { return shmsem::test::other_threads_parked(); }));
  remote_holder holder(url, 600ms);
  holder.proc.kill(SIGKILL);
  const auto killed = clk::now();
  std::optional<Permit> p;
  ASSERT_TRUE(eventually([&] { return (p = s.try_acquire()).has_value(); }, 20s))
      << "the lapsed 600 ms session was never reaped";
  EXPECT_LE(clk::now() - killed, 10s);
}

TEST(RedisFault, KilledHoldersSeatReachesABlockedWaiterWithinTheSessionTimeoutPlusOneSecond) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  constexpr auto kSession = 1500ms;
  remote_holder holder(url, kSession);
  auto s = Semaphore::open(url, 1, {.session_timeout = kSession});
  auto waiting = std::async(std::launch::async, [&] {
    auto p = s.acquire(1, {.wait_timeout = 30s});
    return clk::now();
  });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  const auto killed = clk::now();
  holder.proc.kill(SIGKILL);
  const auto granted = waiting.get();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(granted - killed);
  RecordProperty("reclaim_ms", static_cast<int>(took.count()));
  EXPECT_LE(took, kSession + 1s) << took.count() << " ms";
}

}  // namespace
}  // namespace shmsem
