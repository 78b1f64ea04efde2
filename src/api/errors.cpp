// errors.cpp: what the library's errors and outcomes are called: the shmsem
// error category, the exception types and the names of the public enums.

#include <shmsem/errors.hpp>
#include <shmsem/observer.hpp>
#include <shmsem/stats.hpp>
#include <shmsem/version.hpp>

#include "base/reasons.hpp"

namespace shmsem {

namespace {
class category_impl : public std::error_category {
 public:
  const char* name() const noexcept override { return "shmsem"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::timeout:
        return "timed out waiting for seats";
      case errc::cancelled:
        return "acquisition cancelled";
      case errc::shutdown:
        return "shut down";
      case errc::exceeds_capacity:
        return "more seats asked for than the capacity";
      case errc::not_held:
        return "the permit's seats were lost";
      case errc::bad_segment:
        return "not a valid shmsem segment";
      case errc::layout_mismatch:
        return "segment layout version or format differs";
      case errc::truncated:
        return "segment file truncated";
      case errc::permission_denied:
        return "permission denied";
      case errc::no_space:
        return "no space left for the segment";
      case errc::invalid_key:
        return "invalid key";
      case errc::not_found:
        return "no such semaphore";
      case errc::busy:
        return "segment busy (initialization did not finish in time)";
      case errc::too_many:
        return "a table of the segment is full";
      case errc::lock_timeout:
        return "the segment lock stayed busy past the timeout";
      case errc::untrusted_owner:
        return "the segment belongs to a user this process does not trust";
    }
    return "unknown shmsem error";
  }
  std::error_condition default_error_condition(int ev) const noexcept override {
    switch (static_cast<errc>(ev)) {
      case errc::timeout:
      case errc::lock_timeout:
        return std::errc::timed_out;
      case errc::cancelled:
      case errc::shutdown:
        return std::errc::operation_canceled;
      case errc::exceeds_capacity:
      case errc::invalid_key:
        return std::errc::invalid_argument;
      case errc::permission_denied:
      case errc::untrusted_owner:
        return std::errc::permission_denied;
      case errc::no_space:
        return std::errc::no_space_on_device;
      case errc::not_found:
        return std::errc::no_such_file_or_directory;
      case errc::busy:
        return std::errc::device_or_resource_busy;
      case errc::too_many:
        return std::errc::resource_unavailable_try_again;
      default:
        return std::error_condition(ev, *this);
    }
  }
};
}  // namespace

const std::error_category& category() noexcept {
  static const category_impl c;
  return c;
}

std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), category()};
}

const char* to_string(Reason r) noexcept {
  if (const auto* row = detail::info_of(r)) return row->name;
  return "unknown";
}

const char* to_string(Outcome o) noexcept {
  switch (o) {
    case Outcome::acquired:
      return "acquired";
    case Outcome::timeout:
      return "timeout";
    case Outcome::cancelled:
      return "cancelled";
    case Outcome::shutdown:
      return "shutdown";
    case Outcome::exceeds_capacity:
      return "exceeds_capacity";
    case Outcome::error:
      return "error";
    case Outcome::unavailable:
      return "unavailable";
  }
  return "unknown";
}

const char* to_string(Fairness f) noexcept {
  switch (f) {
    case Fairness::fifo:
      return "fifo";
    case Fairness::barging:
      return "barging";
  }
  return "unknown";
}

const char* to_string(HolderState s) noexcept {
  switch (s) {
    case HolderState::alive:
      return "alive";
    case HolderState::dead:
      return "dead";
    case HolderState::expired:
      return "expired";
  }
  return "unknown";
}

std::uint64_t Histogram::count() const {
  std::uint64_t n = 0;
  for (auto c : counts) n += c;
  return n;
}

const char* runtime_version() noexcept {
  return kVersionString;
}

Error::Error(std::error_code code, const std::string& what)
    : std::runtime_error(what), code_(code) {}

AcquisitionError::AcquisitionError(Reason reason, const std::string& what, std::exception_ptr cause)
    : Error(make_error_code(reason == Reason::timeout            ? errc::timeout
                            : reason == Reason::cancelled        ? errc::cancelled
                            : reason == Reason::shutdown         ? errc::shutdown
                            : reason == Reason::exceeds_capacity ? errc::exceeds_capacity
                                                                 : errc::bad_segment),
            what),
      reason_(reason),
      cause_(std::move(cause)) {}

PermitNotHeldError::PermitNotHeldError(const std::string& what, bool inherited)
    : Error(make_error_code(errc::not_held), what), inherited_(inherited) {}

ExtensionError::ExtensionError(const std::string& what)
    : Error(make_error_code(errc::not_held), what) {}

SegmentError::SegmentError(std::error_code code, const std::string& what) : Error(code, what) {}

Observer::~Observer() = default;
void Observer::on_wait_start(std::string_view, int) {}
void Observer::on_wait_end(const AcquireEvent&) {}
void Observer::on_acquire(const AcquireEvent&) {}
void Observer::on_release(const ReleaseEvent&) {}
void Observer::on_lost(std::string_view, std::uint64_t, std::string_view) {}
void Observer::on_reaped(std::string_view, int) {}

}  // namespace shmsem
