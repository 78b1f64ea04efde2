// redis/hash.cpp: SHA-1 and CRC16, as Redis computes them (see hash.hpp).

#include "redis/hash.hpp"

#include <array>
#include <cstdint>

namespace shmsem::detail::redis {

namespace {
std::uint32_t rol(std::uint32_t v, int n) {
  return (v << n) | (v >> (32 - n));
}
}  // namespace

// FIPS 180-4, one 64-byte block at a time. Scripts are hashed once per
// process, so clarity wins over speed here.
std::string sha1_hex(std::string_view data) {
  std::array<std::uint32_t, 5> h = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  std::string msg(data);
  const std::uint64_t bits = static_cast<std::uint64_t>(data.size()) * 8;
  msg += static_cast<char>(0x80);
  while (msg.size() % 64 != 56) msg += '\0';
  for (int i = 7; i >= 0; --i) msg += static_cast<char>((bits >> (i * 8)) & 0xff);
  for (std::size_t off = 0; off < msg.size(); off += 64) {
    std::uint32_t w[80];
    for (int i = 0; i < 16; ++i) {
      const auto* p = reinterpret_cast<const unsigned char*>(msg.data() + off +
                                                             static_cast<std::size_t>(i) * 4);
      w[i] = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
             (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
    }
    for (int i = 16; i < 80; ++i) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; ++i) {
      std::uint32_t f, k;
      if (i < 20) {
        f = (b & c) | (~b & d);
        k = 0x5A827999;
      } else if (i < 40) {
        f = b ^ c ^ d;
        k = 0x6ED9EBA1;
      } else if (i < 60) {
        f = (b & c) | (b & d) | (c & d);
        k = 0x8F1BBCDC;
      } else {
        f = b ^ c ^ d;
        k = 0xCA62C1D6;
      }
      const std::uint32_t t = rol(a, 5) + f + e + k + w[i];
      e = d;
      d = c;
      c = rol(b, 30);
      b = a;
      a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::uint32_t v : h)
    for (int i = 28; i >= 0; i -= 4) out += kHex[(v >> i) & 15];
  return out;
}

int key_slot(std::string_view key) noexcept {
  // Only the part between the first '{' and the next '}' counts, if non-empty.
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  // CRC16-CCITT (XModem), as in the Redis Cluster specification.
  std::uint16_t crc = 0;
  for (unsigned char c : key) {
    crc = static_cast<std::uint16_t>(crc ^ (c << 8));
    for (int i = 0; i < 8; ++i)
      crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc & 16383;
}

}  // namespace shmsem::detail::redis
