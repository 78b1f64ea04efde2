// key.hpp: keys and the file names they map to.
//
// A key is 1..255 bytes without NUL. Its segment is /dev/shm/shmsem.<name>:
// bytes outside [A-Za-z0-9._:@+=,-] become %XX, which is injective and keeps
// '/' and control bytes out of the name. When that name would be too long,
// it becomes "#" + 32 hex digits of a 128-bit hash + a readable prefix; the
// full key is stored in the segment and checked on attach, so a hash
// collision is an error, never a shared semaphore.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shmsem::detail {

inline constexpr std::string_view kNamePrefix = "shmsem.";

/// Throws std::invalid_argument (naming the problem) for an invalid key.
void validate_key(std::string_view key);

/// The /dev/shm file name (without directory) of a valid key.
std::string key_to_name(std::string_view key);

/// The key of a file name made by key_to_name, or nullopt when the name is
/// hashed (read the key from the segment) or not a shmsem name at all.
std::optional<std::string> name_to_key(std::string_view name);

/// True if `name` has the form of a hashed name.
bool is_hashed_name(std::string_view name);

}  // namespace shmsem::detail
