// backends.cpp: which backend serves a key. A key that is no URL names a
// shared-memory segment; a URL goes to the backend that claims its scheme.
// Adding a backend: its folder, and one line in kKinds below.

#include <stdexcept>
#include <string>

#include "base/backend.hpp"
#include "base/key_syntax.hpp"
#ifdef SHMSEM_WITH_REDIS
#include "redis/backend.hpp"
#endif

namespace shmsem::detail {

namespace {

const backend_kind* const kKinds[] = {
#ifdef SHMSEM_WITH_REDIS
    &redis::kind,
#endif
    nullptr,  // ends the list, which is otherwise empty without Redis
};

}  // namespace

const backend_kind* backend_of(std::string_view key) {
  const std::optional<std::string> scheme = url_scheme(key);
  if (!scheme) return nullptr;
  std::string served;
  for (const backend_kind* k : kKinds) {
    if (!k) break;
    if (k->claims(key)) return k;
    served += served.empty() ? "" : ", ";
    served += k->schemes;
  }
  throw std::invalid_argument(
      "shmsem: '" + shown_url(key) + "' is a " + *scheme + ":// URL, and " +
      (served.empty() ? std::string("this build of shmsem serves no URL (it was built without "
                                    "Redis: SHMSEM_WITH_REDIS=OFF)")
                      : "shmsem serves only " + served));
}

}  // namespace shmsem::detail
