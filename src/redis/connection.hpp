// redis/connection.hpp: one hiredis connection to one server, with a
// deadline on every call, and the errors a conversation can end in.
//
// This is the only file that includes hiredis. A connection logs in (AUTH),
// selects its database and PINGs at open, so a wrong password or a server
// that does not speak Redis is found there, with a message that says so.
// After any I/O error or timeout a connection is broken for good: hiredis
// cannot resynchronise a half-read reply, so the owner drops it and opens
// another.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "redis/url.hpp"

struct redisContext;
struct redisReply;

namespace shmsem::detail::redis {

/// A conversation with a server failed: it could not be reached, did not
/// answer in time, refused the login, or does not speak Redis. `code` is
/// errno-like (connection_refused, timed_out, permission_denied,
/// protocol_error, ...).
class io_error : public std::runtime_error {
 public:
  io_error(std::error_code code, const std::string& what) : std::runtime_error(what), code_(code) {}
  const std::error_code& code() const noexcept { return code_; }

 private:
  std::error_code code_;
};

/// A reply, owned. Accessors never throw; a missing element reads as nil.
class reply {
 public:
  reply() = default;
  explicit reply(redisReply* r) : r_(r, &free_reply) {}

  bool nil() const noexcept;
  bool is_error() const noexcept;
  bool is_array() const noexcept;
  bool is_integer() const noexcept;
  /// A string, status or error reply's text; empty otherwise.
  std::string_view str() const noexcept;
  long long integer() const noexcept;  ///< an integer reply, or a string holding a number
  std::size_t size() const noexcept;   ///< elements of an array
  /// Element i of an array, not owned: valid while this reply lives.
  reply at(std::size_t i) const noexcept;

 private:
  static void free_reply(redisReply* r) noexcept;
  std::shared_ptr<redisReply> r_;
};

/// The most a connection buffers for one reply: far more than any reply
/// shmsem asks for, far less than a peer that is not Redis could make it take.
constexpr std::size_t kMaxReplyBytes = std::size_t{64} << 20;

class connection {
 public:
  /// Connects to `ep`, logs in, selects the database and checks that the
  /// peer answers PING, all before `deadline_ns` (CLOCK_MONOTONIC). Throws
  /// io_error.
  static std::unique_ptr<connection> open(const endpoint& ep, std::int64_t deadline_ns);
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// Sends one command and reads its reply, all before `deadline_ns`
  /// (however slowly the reply arrives). An error reply is returned, not
  /// thrown; an I/O failure, a reply past the deadline or larger than
  /// kMaxReplyBytes throws io_error and breaks the connection.
  reply run(const std::vector<std::string_view>& args, std::int64_t deadline_ns);
  /// Queues a command without sending it (pipelining).
  void append(const std::vector<std::string_view>& args);
  /// Sends what is queued and reads one reply.
  reply read(std::int64_t deadline_ns);

  /// For a subscriber: reads what the socket has, without blocking, and
  /// returns every complete reply. Throws io_error on EOF or an error.
  std::vector<reply> read_ready();
  /// For a subscriber: writes what is queued (blocking up to the deadline).
  void flush(std::int64_t deadline_ns);

  int fd() const noexcept;
  bool broken() const noexcept { return broken_; }
  const endpoint& where() const noexcept { return ep_; }

 private:
  connection(redisContext* c, const endpoint& ep) : c_(c), ep_(ep) {}
  /// Throws io_error (timed_out) and marks the connection broken if the
  /// deadline has passed.
  void check_deadline(std::int64_t deadline_ns);
  /// Throws io_error (message_size) if more than kMaxReplyBytes wait unparsed.
  void check_size();
  void send_queued(std::int64_t deadline_ns);
  /// Polls without sleeping until the reply to what was sent at `sent_ns`
  /// is readable, while one is expected soon (see kMaxSpinNs); true if it is.
  bool spin_for_reply(std::int64_t sent_ns, std::int64_t deadline_ns) const;
  [[noreturn]] void fail(const char* doing);

  redisContext* c_;
  endpoint ep_;
  std::string out_;  // commands queued, not yet sent
  bool broken_ = false;
  // Smoothed time from a send to its whole reply (1/8 per reply), for
  // spin_for_reply(); it starts as a local server would answer.
  std::int64_t reply_ns_ = 50'000;
};

}  // namespace shmsem::detail::redis
