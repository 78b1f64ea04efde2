// key_syntax.cpp: the percent escape of keys, and the scheme of a URL.

#include "base/key_syntax.hpp"

namespace shmsem::detail {

std::string percent_escape(std::string_view s, std::string_view also) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (is_plain_byte(c) || also.find(static_cast<char>(c)) != std::string_view::npos) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::optional<std::string> url_scheme(std::string_view key) {
  const auto end = key.find("://");
  if (end == std::string_view::npos || end == 0) return std::nullopt;
  std::string scheme;
  for (std::size_t i = 0; i < end; ++i) {
    const char c = key[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool other = (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
    if (!alpha && (i == 0 || !other)) return std::nullopt;
    scheme += alpha ? static_cast<char>(c | 0x20) : c;
  }
  return scheme;
}

std::string shown_url(std::string_view url) {
  std::string shown(url);
  const std::size_t start = shown.find("://");
  if (start == std::string::npos) return shown;
  const std::string_view scheme = url.substr(0, start);
  const std::string_view rest = url.substr(start + 3);
  // The login ends at the authority's last '@' (a password may hold '@'),
  // or, where the authority is empty and a socket's absolute path follows
  // (redis+unix://login@/PATH), at the '@' before that path (a password
  // may hold '/').
  std::size_t at = std::string_view::npos;
  if (scheme.ends_with("+unix"))
    at = rest.empty() || rest[0] == '/' ? std::string_view::npos : rest.find("@/");
  else
    at = rest.substr(0, rest.find_first_of("/?")).rfind('@');
  if (at != std::string_view::npos) shown.replace(start + 3, at, "...");
  return shown;
}

}  // namespace shmsem::detail
