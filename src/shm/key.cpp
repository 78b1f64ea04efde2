// key.cpp: which keys are valid, and the /dev/shm name each one maps to.

#include "shm/key.hpp"

#include <array>
#include <cstdint>
#include <stdexcept>

#include "base/key_syntax.hpp"
#include "shm/layout.hpp"

namespace shmsem::detail {

namespace {
constexpr std::size_t kMaxName = 255;  // NAME_MAX of tmpfs

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::uint64_t fnv1a(std::string_view s, std::uint64_t basis) {
  std::uint64_t h = basis;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}
}  // namespace

void validate_key(std::string_view key) {
  if (key.empty()) throw std::invalid_argument("shmsem: the key is empty");
  if (key.size() > layout::kMaxKeySize)
    throw std::invalid_argument("shmsem: the key is " + std::to_string(key.size()) +
                                " bytes long; the limit is 255");
  if (key.find('\0') != std::string_view::npos)
    throw std::invalid_argument("shmsem: the key contains a NUL byte");
}

std::string key_to_name(std::string_view key) {
  std::string esc = percent_escape(key);
  if (kNamePrefix.size() + esc.size() <= kMaxName) return std::string(kNamePrefix) + esc;
  // Two independent 64-bit FNV-1a hashes make 128 bits; the stored key
  // catches the (astronomically rare) collision.
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name(kNamePrefix);
  name += '#';
  for (std::uint64_t h : {fnv1a(key, 1469598103934665603ULL), fnv1a(key, 0x9e3779b97f4a7c15ULL)})
    for (int i = 60; i >= 0; i -= 4) name += kHex[(h >> i) & 15];
  name += '.';
  // A readable prefix, cut at an escape boundary.
  std::size_t cut = std::min<std::size_t>(100, esc.size());
  while (cut > 0 && cut < esc.size() && (esc[cut - 1] == '%' || (cut >= 2 && esc[cut - 2] == '%')))
    --cut;
  name += esc.substr(0, cut);
  return name;
}

bool is_hashed_name(std::string_view name) {
  return name.size() > kNamePrefix.size() && name.substr(0, kNamePrefix.size()) == kNamePrefix &&
         name[kNamePrefix.size()] == '#';
}

std::optional<std::string> name_to_key(std::string_view name) {
  if (name.substr(0, kNamePrefix.size()) != kNamePrefix) return std::nullopt;
  if (is_hashed_name(name)) return std::nullopt;
  std::string_view esc = name.substr(kNamePrefix.size());
  if (esc.empty()) return std::nullopt;
  std::string key;
  for (std::size_t i = 0; i < esc.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(esc[i]);
    if (c == '%') {
      if (i + 2 >= esc.size()) return std::nullopt;
      int hi = hex_value(esc[i + 1]), lo = hex_value(esc[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      unsigned char b = static_cast<unsigned char>(hi * 16 + lo);
      if (is_plain_byte(b)) return std::nullopt;  // not what escape() makes: not ours
      key += static_cast<char>(b);
      i += 2;
    } else if (is_plain_byte(c)) {
      key += static_cast<char>(c);
    } else {
      return std::nullopt;
    }
  }
  if (key.empty() || key.size() > layout::kMaxKeySize || key.find('\0') != std::string::npos)
    return std::nullopt;
  return key;
}

}  // namespace shmsem::detail
