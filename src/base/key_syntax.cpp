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
  const std::size_t at = shown.find('@', start + 3);
  if (at != std::string::npos && at < shown.find('/', start + 3))
    shown.replace(start + 3, at - start - 3, "...");
  return shown;
}

}  // namespace shmsem::detail
