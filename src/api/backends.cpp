// backends.cpp: which backend serves a key. A key that is no URL names a
// shared-memory segment; a URL goes to the backend that claims its scheme.
// Adding a backend: its folder, and one line in kKinds below.

#include <stdexcept>
#include <string>

#include "base/backend.hpp"
#include "base/key_syntax.hpp"
#include "shm/backend.hpp"
#ifdef SHMSEM_WITH_REDIS
#include "redis/backend.hpp"
#endif
#ifdef SHMSEM_WITH_FAKE
#include "fake/backend.hpp"
#endif

namespace shmsem::detail {

namespace {

const backend_kind* const kKinds[] = {
#ifdef SHMSEM_WITH_REDIS
    &redis::kind,
#endif
#ifdef SHMSEM_WITH_FAKE
    &fake::kind,  // the test build's (fake/backend.hpp)
#endif
    &segment_kind,  // every key that is no URL
};

}  // namespace

std::span<const backend_kind* const> backend_kinds() noexcept {
  return kKinds;
}

const backend_kind& backend_of(std::string_view key) {
  std::string served;
  for (const backend_kind* k : kKinds) {
    if (k->claims(key)) return *k;
    if (!k->schemes) continue;
    served += served.empty() ? "" : ", ";
    served += k->schemes;
  }
  // Only a URL is left unclaimed.
  std::string what = "shmsem: '" + shown_url(key) + "' is a " + url_scheme(key).value_or("") +
                     ":// URL, and " +
                     (served.empty() ? std::string("this build of shmsem serves no URL")
                                     : "this build of shmsem serves only " + served);
#ifndef SHMSEM_WITH_REDIS
  what += " (it was built without Redis: SHMSEM_WITH_REDIS=OFF)";
#endif
  throw std::invalid_argument(what);
}

}  // namespace shmsem::detail
