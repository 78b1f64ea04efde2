// key_syntax.hpp: the text of keys, as every backend and the registry of
// backends read it: the percent escape that keeps a key readable and safe
// in a file name (shm/key.cpp) and in a Redis URL (redis/url.cpp), and the
// scheme that makes a key a URL.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shmsem::detail {

/// True for the bytes an escape leaves as they are: [A-Za-z0-9._:@+=,-].
constexpr bool is_plain_byte(unsigned char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '@' || c == '+' || c == '=' || c == ',' || c == '-';
}

/// `s` with every byte that is not plain (and not in `also`) as %XX, with
/// upper-case hex digits.
std::string percent_escape(std::string_view s, std::string_view also = {});

/// The scheme of a key that is a URL, in lower case ("redis+unix"), or
/// nullopt for a key that is not: RFC 3986's ALPHA *( ALPHA / DIGIT / "+"
/// / "-" / "." ) followed by "://". Any such key is a URL, never a
/// shared-memory key.
std::optional<std::string> url_scheme(std::string_view key);

/// A URL as messages show it: a login before '@' in its authority (which
/// may hold a password) becomes "...".
std::string shown_url(std::string_view url);

}  // namespace shmsem::detail
