// redis/connection.cpp: one hiredis connection with deadlines (see
// connection.hpp).

#include "redis/connection.hpp"

#include <hiredis.h>
#include <poll.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "sys/clock.hpp"
#include "sys/futex.hpp"
#include "sys/proc.hpp"
#include "sys/socket.hpp"

namespace shmsem::detail::redis {

// ---------------------------------------------------------------- reply

void reply::free_reply(redisReply* r) noexcept {
  if (r) freeReplyObject(r);
}
bool reply::nil() const noexcept {
  return !r_ || r_->type == REDIS_REPLY_NIL;
}
bool reply::is_error() const noexcept {
  return r_ && r_->type == REDIS_REPLY_ERROR;
}
bool reply::is_array() const noexcept {
  return r_ && r_->type == REDIS_REPLY_ARRAY;
}
bool reply::is_integer() const noexcept {
  return r_ && r_->type == REDIS_REPLY_INTEGER;
}
std::string_view reply::str() const noexcept {
  if (!r_) return {};
  switch (r_->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return {r_->str, r_->len};
    default:
      return {};
  }
}
long long reply::integer() const noexcept {
  if (!r_) return 0;
  if (r_->type == REDIS_REPLY_INTEGER) return r_->integer;
  if (r_->type == REDIS_REPLY_STRING) return std::strtoll(std::string(str()).c_str(), nullptr, 10);
  return 0;
}
std::size_t reply::size() const noexcept {
  return is_array() ? r_->elements : 0;
}
reply reply::at(std::size_t i) const noexcept {
  reply out;
  if (i < size()) out.r_ = std::shared_ptr<redisReply>(r_, r_->element[i]);
  return out;
}

// ---------------------------------------------------------------- connection

namespace {

timeval remaining(std::int64_t deadline_ns) {
  // A zero timeval means "no timeout" to the kernel: never pass it.
  const std::int64_t left = std::max<std::int64_t>(deadline_ns - sys::precise_now_ns(), 1000);
  timeval tv;
  tv.tv_sec = static_cast<time_t>(left / 1'000'000'000);
  tv.tv_usec = static_cast<suseconds_t>((left % 1'000'000'000) / 1000);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1;
  return tv;
}

// The errno-like code of a failed context.
std::error_code code_of(const redisContext* c, int saved_errno) {
  switch (c->err) {
    case REDIS_ERR_EOF:
      // Closed by the server: unlike a reset, it may have run the command.
      return std::make_error_code(std::errc::connection_aborted);
    case REDIS_ERR_PROTOCOL:
      return std::make_error_code(std::errc::protocol_error);
    case REDIS_ERR_OOM:
      return std::make_error_code(std::errc::not_enough_memory);
    default:
      break;
  }
  if (saved_errno == EAGAIN || saved_errno == EINPROGRESS || saved_errno == ETIMEDOUT)
    return std::make_error_code(std::errc::timed_out);
  if (saved_errno != 0) return {saved_errno, std::system_category()};
  return std::make_error_code(std::errc::io_error);
}

std::string describe(const redisContext* c, const std::error_code& code) {
  std::string text = c->errstr[0] ? c->errstr : code.message();
  if (code == std::errc::timed_out) text = "no answer in time (" + text + ")";
  if (code == std::errc::protocol_error) text += " (is it a Redis server?)";
  if (code == std::errc::not_enough_memory) text += " (or a reply larger than shmsem accepts)";
  return text;
}

// hiredis 0.14 allocates an array's element table as soon as it reads the
// count: a peer that announces a billion elements would make it allocate
// gigabytes. Arrays above the cap are refused (hiredis then reports "out of
// memory"); shmsem's largest reply, info() with a holder list, is far below.
constexpr int kMaxReplyElements = 4 << 20;

redisReplyObjectFunctions capped_functions;
void* (*default_create_array)(const redisReadTask*, int) = nullptr;

void* create_capped_array(const redisReadTask* task, int elements) {
  if (elements > kMaxReplyElements) return nullptr;
  return default_create_array(task, elements);
}

void cap_arrays(redisContext* c) {
  static std::once_flag once;
  std::call_once(once, [c] {
    capped_functions = *c->reader->fn;
    default_create_array = capped_functions.createArray;
    capped_functions.createArray = &create_capped_array;
  });
  c->reader->fn = &capped_functions;
}

}  // namespace

std::unique_ptr<connection> connection::open(const endpoint& ep, std::int64_t deadline_ns) {
  const timeval tv = remaining(deadline_ns);
  errno = 0;
  redisContext* c = ep.unix_socket ? redisConnectUnixWithTimeout(ep.path.c_str(), tv)
                                   : redisConnectWithTimeout(ep.host.c_str(), ep.port, tv);
  const int saved = errno;
  if (!c) throw io_error(std::make_error_code(std::errc::not_enough_memory), "out of memory");
  if (c->err) {
    const std::error_code code = code_of(c, saved);
    const std::string text = "cannot connect to " + ep.where() + ": " + describe(c, code);
    redisFree(c);
    throw io_error(code, text);
  }
  cap_arrays(c);
  std::unique_ptr<connection> conn(new connection(c, ep));
  // Login, database and a PING in one round trip.
  int expected = 0;
  if (!ep.password.empty()) {
    if (ep.user.empty())
      conn->append({"AUTH", ep.password});
    else
      conn->append({"AUTH", ep.user, ep.password});
    ++expected;
  }
  const std::string db = std::to_string(ep.db);
  if (ep.db != 0) {
    conn->append({"SELECT", db});
    ++expected;
  }
  conn->append({"PING"});
  ++expected;
  for (int i = 0; i < expected; ++i) {
    reply r = conn->read(deadline_ns);
    if (!r.is_error()) continue;
    const std::string_view e = r.str();
    conn->broken_ = true;
    const bool login = e.starts_with("WRONGPASS") || e.starts_with("NOAUTH") ||
                       e.find("AUTH") != std::string_view::npos ||
                       e.find("password") != std::string_view::npos;
    throw io_error(std::make_error_code(login ? std::errc::permission_denied : std::errc::io_error),
                   std::string(login ? "login to " : "setting up the connection to ") + ep.where() +
                       " refused: " + std::string(e));
  }
  return conn;
}

connection::~connection() {
  redisFree(c_);
}

int connection::fd() const noexcept {
  return c_->fd;
}

// Socket timeouts are not used: setting them costs two system calls per
// command, and poll() with the time left bounds every wait on its own.
void connection::check_deadline(std::int64_t deadline_ns) {
  if (deadline_ns - sys::precise_now_ns() <= 0) {
    broken_ = true;
    throw io_error(std::make_error_code(std::errc::timed_out),
                   "no time left to talk to " + ep_.where());
  }
}

void connection::fail(const char* doing) {
  broken_ = true;
  const std::error_code code = code_of(c_, errno);
  throw io_error(code, std::string(doing) + " " + ep_.where() + ": " + describe(c_, code));
}

void connection::append(const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* cmd = nullptr;
  const int len =
      redisFormatCommandArgv(&cmd, static_cast<int>(args.size()), argv.data(), lens.data());
  if (len < 0) {
    broken_ = true;
    throw io_error(std::make_error_code(std::errc::not_enough_memory), "out of memory");
  }
  out_.append(cmd, static_cast<std::size_t>(len));
  redisFreeCommand(cmd);
}

// hiredis writes with write(2), and a write to a server that went away
// raises SIGPIPE, which kills a program that did not ignore it. A library
// must not change that for its host process: queued commands are sent here
// with MSG_NOSIGNAL instead, so hiredis's own output buffer stays empty.
// The send never blocks: a full socket buffer is waited out with poll()
// within the deadline.
void connection::send_queued(std::int64_t deadline_ns) {
  check_deadline(deadline_ns);
  std::size_t done = 0;
  while (done < out_.size()) {
    const ssize_t n = sys::send_nosignal(c_->fd, out_.data() + done, out_.size() - done);
    if (n >= 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      const std::int64_t left = deadline_ns - sys::precise_now_ns();
      pollfd p{c_->fd, POLLOUT, 0};
      const int ready =
          left <= 0 ? 0 : sys::poll_fds(&p, 1, static_cast<int>((left + 999'999) / 1'000'000));
      if (ready > 0 || (ready < 0 && errno == EINTR)) continue;
      err = ready == 0 ? EAGAIN : errno;
    }
    broken_ = true;
    const std::error_code code = err == EAGAIN ? std::make_error_code(std::errc::timed_out)
                                               : std::error_code(err, std::system_category());
    throw io_error(code, "writing to " + ep_.where() + ": " + code.message());
  }
  out_.clear();
}

void connection::check_size() {
  const redisReader* rd = c_->reader;
  if (rd->len - rd->pos <= kMaxReplyBytes) return;
  broken_ = true;
  throw io_error(std::make_error_code(std::errc::message_size),
                 "a reply from " + ep_.where() + " is larger than " +
                     std::to_string(kMaxReplyBytes >> 20) +
                     " MiB, more than any shmsem asks for (is it a Redis server?)");
}

// A thread that sleeps in poll() until a local server answers pays for
// its own wake-up, and on a virtual machine whose CPU went idle that is as
// long again as the round trip (a PING over a unix socket: about 50 us
// sleeping, 21 us polling without sleep; docs/redis.md, "Waiting for a
// reply"). So a reply expected within kMaxSpinNs is polled for, without
// sleeping, for up to twice its smoothed time; a farther server is never
// spun for, nor is a host where the server would need the CPU the spin
// holds (one CPU, or a busy host: see the loop).
namespace {
constexpr std::int64_t kMaxSpinNs = 150'000;
constexpr std::int64_t kBusyHostNs = 20'000;

bool spinning_pays() noexcept {
  static const bool pays = sys::cpus_usable() > 1;
  return pays;
}
}  // namespace

bool connection::spin_for_reply(std::int64_t sent_ns, std::int64_t deadline_ns) const {
  if (reply_ns_ > kMaxSpinNs || !spinning_pays()) return false;
  const std::int64_t until = std::min(deadline_ns, sent_ns + 2 * reply_ns_);
  pollfd p{c_->fd, POLLIN, 0};
  for (std::int64_t t = sys::precise_now_ns(); t < until;) {
    if (sys::poll_fds(&p, 1, 0) > 0) return true;
    // On a busy host the spin would hold a CPU the server needs: each
    // round yields it, and one that comes back late says others want it.
    sys::yield();
    const std::int64_t after = sys::precise_now_ns();
    if (after - t > kBusyHostNs) return false;
    t = after;
  }
  return false;
}

reply connection::read(std::int64_t deadline_ns) {
  if (broken_)
    throw io_error(std::make_error_code(std::errc::connection_reset),
                   "the connection to " + ep_.where() + " is broken");
  send_queued(deadline_ns);
  const std::int64_t sent_ns = sys::precise_now_ns();
  bool spun = false;
  // hiredis's own redisGetReply() would allow every read() the whole time
  // left, so a reply trickling in could take any time: the deadline is
  // checked between reads here, and what is buffered is bounded.
  for (;;) {
    void* r = nullptr;
    errno = 0;
    if (redisGetReplyFromReader(c_, &r) != REDIS_OK) fail("parsing a reply from");
    if (r) {
      reply_ns_ += (sys::precise_now_ns() - sent_ns - reply_ns_) / 8;
      return reply(static_cast<redisReply*>(r));
    }
    check_size();
    if (!std::exchange(spun, true) && spin_for_reply(sent_ns, deadline_ns)) {
      errno = 0;
      if (redisBufferRead(c_) != REDIS_OK) fail("reading from");
      continue;
    }
    // A caller preempted or stopped between its request and this read may
    // find its deadline past and the reply waiting: what has arrived is
    // still read (a poll that does not block), only no more is waited for.
    const std::int64_t left = deadline_ns - sys::precise_now_ns();
    pollfd p{c_->fd, POLLIN, 0};
    const int ready =
        sys::poll_fds(&p, 1, left <= 0 ? 0 : static_cast<int>((left + 999'999) / 1'000'000));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      broken_ = true;
      throw io_error(std::make_error_code(std::errc::timed_out),
                     "talking to " + ep_.where() + ": no answer in time");
    }
    if (ready < 0) fail("waiting for");
    errno = 0;
    if (redisBufferRead(c_) != REDIS_OK) fail("reading from");
  }
}

reply connection::run(const std::vector<std::string_view>& args, std::int64_t deadline_ns) {
  append(args);
  return read(deadline_ns);
}

void connection::flush(std::int64_t deadline_ns) {
  send_queued(deadline_ns);
}

std::vector<reply> connection::read_ready() {
  std::vector<reply> out;
  errno = 0;
  // The socket is blocking: read only what poll() reported.
  if (redisBufferRead(c_) != REDIS_OK) fail("reading from");
  for (;;) {
    void* r = nullptr;
    if (redisGetReplyFromReader(c_, &r) != REDIS_OK) fail("parsing a reply from");
    if (!r) break;
    out.emplace_back(static_cast<redisReply*>(r));
  }
  check_size();
  return out;
}

}  // namespace shmsem::detail::redis
