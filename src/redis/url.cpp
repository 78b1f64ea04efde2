// redis/url.cpp: parsing and printing Redis semaphore URLs (see url.hpp).

#include "redis/url.hpp"

#include "base/key_syntax.hpp"

#include <charconv>
#include <stdexcept>

namespace shmsem::detail::redis {

namespace {

constexpr std::string_view kTcp = "redis://";
constexpr std::string_view kUnix = "redis+unix://";

[[noreturn]] void bad(const std::string& shown, const std::string& why) {
  throw std::invalid_argument("shmsem: bad Redis URL '" + shown + "': " + why);
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string decode(std::string_view s, const std::string& shown, const char* what) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int hi = i + 2 < s.size() ? hex(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? hex(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) bad(shown, std::string("a broken %-escape in the ") + what);
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string encode(std::string_view s) {
  return percent_escape(s, "~/");
}

int number(std::string_view s, int lo, int hi, const std::string& shown, const char* what) {
  int v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || v < lo || v > hi)
    bad(shown, std::string(what) + " '" + std::string(s) + "' is not a number from " +
                   std::to_string(lo) + " to " + std::to_string(hi));
  return v;
}

// Splits "user[:password]" into the endpoint.
void userinfo(std::string_view info, endpoint& ep, const std::string& shown) {
  const auto colon = info.find(':');
  ep.user = decode(info.substr(0, colon), shown, "user name");
  if (colon != std::string_view::npos)
    ep.password = decode(info.substr(colon + 1), shown, "password");
}

}  // namespace

std::string endpoint::identity() const {
  std::string id = unix_socket ? "unix:" + path : "tcp:" + host + ":" + std::to_string(port);
  id += '\n' + std::to_string(db) + '\n' + user + '\n' + password;
  return id;
}

std::string endpoint::where() const {
  if (unix_socket) return path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

url parse(std::string_view text, bool need_key) {
  url u;
  const std::optional<std::string> given = url_scheme(text);
  const bool unix_socket = given && *given + "://" == kUnix;
  if (!unix_socket && !(given && *given + "://" == kTcp)) {
    // Show the URL without what could be a password (a login before '@').
    const std::string shown = given ? shown_url(text) : std::string(text);
    throw std::invalid_argument(
        "shmsem: '" + shown + "' " +
        (given ? "is a " + *given +
                     ":// URL, and shmsem serves only redis:// and redis+unix:// "
                     "(a TLS server, rediss://, through a local TLS proxy or a "
                     "unix socket: see docs/redis.md)"
               : std::string("is not a Redis URL (redis:// or redis+unix://)")));
  }
  const std::string_view scheme = unix_socket ? kUnix : kTcp;
  std::string_view rest = text.substr(scheme.size());
  // Until the password is found, messages show the text up to the scheme.
  std::string shown(scheme);
  if (text.find('\0') != std::string_view::npos) bad(shown + "...", "it contains a NUL byte");

  // Userinfo ends at the last '@' of the authority (TCP) or before the
  // absolute socket path (unix).
  std::size_t at = std::string_view::npos;
  if (unix_socket) {
    if (!rest.empty() && rest[0] != '/') {
      at = rest.find("@/");
      if (at == std::string_view::npos) bad(shown + "...", "the socket path must be absolute");
    }
  } else {
    const std::size_t end = rest.find_first_of("/?");
    const std::string_view authority = rest.substr(0, end);
    at = authority.rfind('@');
  }
  std::string_view after = rest;
  if (at != std::string_view::npos) {
    userinfo(rest.substr(0, at), u.ep, shown + "...");
    after = rest.substr(at + 1);
  }
  u.display = std::string(scheme);
  if (!u.ep.user.empty()) u.display += encode(u.ep.user) + "@";
  u.display += after;
  shown = u.display;

  // The query: db=N everywhere, key=KEY on a unix socket.
  std::string_view query;
  const auto qmark = after.find('?');
  if (qmark != std::string_view::npos) {
    query = after.substr(qmark + 1);
    after = after.substr(0, qmark);
  }
  bool have_db = false, have_key = false;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto eq = param.find('=');
    const std::string_view name = param.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : param.substr(eq + 1);
    if (name == "db" && !have_db) {
      u.ep.db = number(value, 0, 1'000'000, shown, "db");
      have_db = true;
    } else if (name == "key" && unix_socket && !have_key) {
      u.key = decode(value, shown, "key");
      have_key = true;
    } else {
      bad(shown, "unknown or repeated parameter '" + std::string(name) + "'" +
                     (name == "key" ? " (a redis:// URL names its KEY in the path)" : ""));
    }
  }

  if (unix_socket) {
    u.ep.unix_socket = true;
    u.ep.path = decode(after, shown, "socket path");
    if (u.ep.path.empty() || u.ep.path[0] != '/') bad(shown, "the socket path must be absolute");
  } else {
    const auto slash = after.find('/');
    std::string_view hostport = after.substr(0, slash);
    if (slash != std::string_view::npos) u.key = decode(after.substr(slash + 1), shown, "key");
    std::string_view port;
    if (!hostport.empty() && hostport[0] == '[') {
      const auto close = hostport.find(']');
      if (close == std::string_view::npos) bad(shown, "an IPv6 address without ']'");
      u.ep.host = std::string(hostport.substr(1, close - 1));
      const std::string_view tail = hostport.substr(close + 1);
      if (!tail.empty() && tail[0] != ':') bad(shown, "text after the IPv6 address");
      if (!tail.empty()) port = tail.substr(1);
      if (!tail.empty() && port.empty()) bad(shown, "an empty port");
    } else {
      const auto colon = hostport.rfind(':');
      u.ep.host = decode(hostport.substr(0, colon), shown, "host");
      if (colon != std::string_view::npos) {
        port = hostport.substr(colon + 1);
        if (port.empty()) bad(shown, "an empty port");
      }
    }
    if (u.ep.host.empty()) bad(shown, "no host");
    if (!port.empty()) u.ep.port = number(port, 1, 65535, shown, "port");
  }

  if (u.key.empty()) {
    if (need_key)
      bad(shown, unix_socket ? "no key (add ?key=KEY)" : "no key (add /KEY after the host)");
  } else {
    if (u.key.size() > 255)
      bad(shown, "the key is " + std::to_string(u.key.size()) + " bytes long; the limit is 255");
    if (u.key.find('\0') != std::string::npos) bad(shown, "the key contains a NUL byte");
  }
  return u;
}

std::string meta_key(std::string_view key) {
  // Braces inside the hash tag would end it early, and '%' keeps the
  // escape reversible.
  std::string tag;
  for (char c : key) {
    if (c == '%')
      tag += "%25";
    else if (c == '{')
      tag += "%7B";
    else if (c == '}')
      tag += "%7D";
    else
      tag += c;
  }
  return "shmsem{" + tag + "}";
}

std::optional<std::string> key_of_meta(std::string_view name) {
  if (name.size() < 9 || name.substr(0, 7) != "shmsem{" || name.back() != '}') return std::nullopt;
  const std::string_view tag = name.substr(7, name.size() - 8);
  if (tag.find_first_of("{}") != std::string_view::npos) return std::nullopt;
  std::string key;
  for (std::size_t i = 0; i < tag.size(); ++i) {
    if (tag[i] != '%') {
      key += tag[i];
      continue;
    }
    const std::string_view esc = tag.substr(i, 3);
    if (esc == "%25")
      key += '%';
    else if (esc == "%7B")
      key += '{';
    else if (esc == "%7D")
      key += '}';
    else
      return std::nullopt;
    i += 2;
  }
  return key;
}

std::string with_key(const url& server, std::string_view key) {
  const endpoint& ep = server.ep;
  std::string s = ep.unix_socket ? std::string(kUnix) : std::string(kTcp);
  if (!ep.user.empty() || !ep.password.empty()) {
    s += encode(ep.user);
    if (!ep.password.empty()) s += ":" + encode(ep.password);
    s += "@";
  }
  if (ep.unix_socket) {
    s += encode(ep.path) + "?key=" + encode(key);
    if (ep.db != 0) s += "&db=" + std::to_string(ep.db);
  } else {
    s += ep.host.find(':') != std::string::npos ? "[" + ep.host + "]" : encode(ep.host);
    s += ":" + std::to_string(ep.port) + "/" + encode(key);
    if (ep.db != 0) s += "?db=" + std::to_string(ep.db);
  }
  return s;
}

}  // namespace shmsem::detail::redis
