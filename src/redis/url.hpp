// redis/url.hpp: the key of a Redis-backed semaphore, which is a URL.
//
//   redis://[user[:password]@]host[:port]/KEY[?db=N]
//   redis+unix://[user[:password]@]/PATH?key=KEY[&db=N]
//
// Parts are percent-decoded. KEY may hold any byte but NUL. A URL without
// KEY names a server (for listing); parse() accepts it only when asked to.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shmsem::detail::redis {

/// Where a server is and how to log in.
struct endpoint {
  bool unix_socket = false;
  std::string host;  // TCP: name or address (IPv6 without brackets)
  int port = 6379;
  std::string path;  // unix socket
  std::string user;
  std::string password;
  int db = 0;

  /// One string per distinct server and login: clients are shared by it.
  std::string identity() const;
  /// host:port or the socket path, for messages.
  std::string where() const;
};

struct url {
  endpoint ep;
  std::string key;      // the semaphore's name inside Redis (KEY), may be empty for a server URL
  std::string display;  // the URL as given, without its password
};

/// Parses a Redis URL. Throws std::invalid_argument naming the URL (without
/// its password) and the problem. `need_key`: a URL without KEY is an error.
url parse(std::string_view text, bool need_key = true);

/// The Redis key of the semaphore's main hash: "shmsem{KEY}", with '%', '{'
/// and '}' in KEY escaped as %25, %7B and %7D (a brace would end the hash
/// tag). All its other keys start with it, so they share its tag and slot.
std::string meta_key(std::string_view key);
/// The KEY of a main hash's name, or nullopt if the name is not one.
std::optional<std::string> key_of_meta(std::string_view name);

/// The URL of semaphore `key` on the server of `server`, with its login
/// (the password too, so that the URL can be opened).
std::string with_key(const url& server, std::string_view key);

}  // namespace shmsem::detail::redis
