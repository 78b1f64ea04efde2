// segment.cpp: how an operation on a segment reports: errors that name the
// segment, failures logged and counted, histograms, and the test hooks.

#include "shm/segment.hpp"

#include <cerrno>
#include <cstring>
#include <string>

#include "base/log.hpp"
#include "shm/segment_shared.hpp"

namespace shmsem::detail {

using namespace layout;

#ifdef SHMSEM_TESTING
namespace testing {
std::atomic<hook_fn> current_hook{nullptr};
void set_hook(hook_fn fn) {
  current_hook.store(fn);
}
std::atomic<int> no_watch_tick{0};
std::atomic<std::int64_t> starvation_bound_ns{0};
}  // namespace testing
#endif

namespace {

errc errc_for(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return errc::permission_denied;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return errc::no_space;
    case ENOENT:
      return errc::not_found;
    case ENAMETOOLONG:
      return errc::invalid_key;
    default:
      return errc::bad_segment;
  }
}

}  // namespace

void throw_segment_errno(const std::string& path, const std::string& what, int err) {
  std::string why = err == ELOOP    ? "it is a symbolic link (refused)"
                    : err == EISDIR ? "it is a directory"
                                    : std::strerror(err);
  const errc code = errc_for(err);
  if (code == errc::bad_segment && err != ELOOP && err != EISDIR)
    throw SegmentError(std::error_code(err, std::system_category()),
                       "shmsem: " + what + " " + path + ": " + why);
  throw SegmentError(make_error_code(code), "shmsem: " + what + " " + path + ": " + why);
}

void record_histogram(shared_histogram& h, std::int64_t ns) {
  if (ns < 0) ns = 0;
  add(h.counts[histogram_bucket(ns)], 1);
  add(h.sum_ns, ns);
}

[[noreturn]] void attachment::fail(errc code, const std::string& problem) const {
  throw SegmentError(make_error_code(code),
                     "shmsem: semaphore '" + key + "' (" + path + "): " + problem);
}

void attachment::report_error(const std::string& what, std::atomic<bool>& failing) const {
  add(hdr->stats.errors, 1);
  if (!failing.exchange(true, std::memory_order_relaxed))
    log().error("semaphore '{}': {}", key, what);
  else
    log().debug("semaphore '{}': {}", key, what);
}

}  // namespace shmsem::detail
