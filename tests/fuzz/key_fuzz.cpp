// key_fuzz.cpp: libFuzzer target over key encoding. For any bytes:
// - as a key: validate_key() accepts exactly the keys of 1..255 bytes without
//   NUL; an accepted key maps to a file name that is one path component
//   (no '/', no NUL, not "." or ".."), at most 255 bytes, printable ASCII,
//   under the "shmsem." prefix; a plain name decodes back to the key, a
//   hashed one is recognised as hashed.
// - as a file name: name_to_key() either refuses it or returns a valid key
//   that encodes back to exactly that name (no two names share a key).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "shm/key.hpp"

using namespace shmsem::detail;

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}

void check_name(const std::string& name) {
  check(!name.empty() && name.size() <= 255);
  check(name != "." && name != "..");
  check(name.compare(0, kNamePrefix.size(), kNamePrefix) == 0);
  for (unsigned char c : name) check(c > 0x20 && c < 0x7f && c != '/');
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  bool valid = true;
  try {
    validate_key(bytes);
  } catch (const std::invalid_argument&) {
    valid = false;
  }
  check(valid == (size >= 1 && size <= 255 && bytes.find('\0') == std::string_view::npos));
  if (valid) {
    const std::string name = key_to_name(bytes);
    check_name(name);
    check(key_to_name(bytes) == name);  // deterministic
    if (is_hashed_name(name)) {
      check(!name_to_key(name).has_value());
    } else {
      const auto back = name_to_key(name);
      check(back.has_value() && *back == bytes);
    }
  }

  if (const auto key = name_to_key(bytes)) {
    validate_key(*key);  // throws (and so crashes the fuzzer) if invalid
    if (size <= 255) check(key_to_name(*key) == bytes);
  }
  return 0;
}
