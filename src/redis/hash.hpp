// redis/hash.hpp: the two hashes the Redis backend computes: SHA-1 names a
// version of its Lua library, CRC16 picks a key's cluster slot.
#pragma once

#include <string>
#include <string_view>

namespace shmsem::detail::redis {

/// The 40 lowercase hex digits of SHA-1(data).
std::string sha1_hex(std::string_view data);

/// The cluster slot (0..16383) of a key, honouring its {hash tag}.
int key_slot(std::string_view key) noexcept;

}  // namespace shmsem::detail::redis
