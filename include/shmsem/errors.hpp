// shmsem/errors.hpp: the typed exceptions every shmsem call throws, and the
// error codes they carry.
//
// Every exception derives from shmsem::Error (itself a std::runtime_error)
// and carries a std::error_code. Codes of the shmsem category compare equal
// to the matching std::errc where one exists (errc::timeout == timed_out,
// errc::permission_denied == permission_denied, ...). Failures of a system
// call keep their errno in std::system_category. Messages name the key or
// the path and the problem.
#pragma once

#include <shmsem/export.hpp>

#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>

namespace shmsem {

/// Why an acquisition did not happen.
enum class Reason {
  timeout,           ///< the wait budget ran out
  cancelled,         ///< the caller's stop_token was triggered
  shutdown,          ///< shutdown() or shutdown_all() ended the wait
  exceeds_capacity,  ///< n is larger than the capacity (at call time or after a shrink)
  error,             ///< the segment could not be used; cause() holds the original error
};

/// Human-readable name of a Reason ("timeout", "cancelled", ...).
SHMSEM_API const char* to_string(Reason r) noexcept;

/// Error codes of the "shmsem" category.
enum class errc {
  timeout = 1,        ///< == std::errc::timed_out
  cancelled,          ///< == std::errc::operation_canceled
  shutdown,           ///< == std::errc::operation_canceled
  exceeds_capacity,   ///< == std::errc::invalid_argument
  not_held,           ///< the permit's seat was lost (expired, reaped or force-released)
  bad_segment,        ///< the file is not a shmsem segment, or it is corrupt
  layout_mismatch,    ///< a segment of another layout version or build format
  truncated,          ///< the file is shorter than its header says
  permission_denied,  ///< == std::errc::permission_denied
  no_space,           ///< == std::errc::no_space_on_device
  invalid_key,        ///< == std::errc::invalid_argument
  not_found,          ///< == std::errc::no_such_file_or_directory
  busy,               ///< the segment's initializer did not finish in time; ==
                      ///< std::errc::device_or_resource_busy
  too_many,           ///< a fixed table (holders, waiters) of the segment is full; ==
                      ///< std::errc::resource_unavailable_try_again
  lock_timeout,       ///< the segment lock stayed busy past the caller's timeout (a process
                      ///< stopped while holding it?); == std::errc::timed_out
  untrusted_owner,    ///< the segment belongs to a user this process does not trust (another
                      ///< user could have made it to break the bound); see
                      ///< Options::trusted_owners; == std::errc::permission_denied
};

/// The "shmsem" error category.
SHMSEM_API const std::error_category& category() noexcept;
/// Makes an error_code of the shmsem category (found by ADL).
SHMSEM_API std::error_code make_error_code(errc e) noexcept;

/// Base of every shmsem exception.
class SHMSEM_API Error : public std::runtime_error {
 public:
  Error(std::error_code code, const std::string& what);
  const std::error_code& code() const noexcept { return code_; }

 private:
  std::error_code code_;
};

/// acquire() did not obtain the seats. reason() says why; for Reason::error
/// cause() holds the exception that made the segment unusable.
class SHMSEM_API AcquisitionError : public Error {
 public:
  AcquisitionError(Reason reason, const std::string& what, std::exception_ptr cause = nullptr);
  Reason reason() const noexcept { return reason_; }
  std::exception_ptr cause() const noexcept { return cause_; }

 private:
  Reason reason_;
  std::exception_ptr cause_;
};

/// release() found that the seat was lost before it: expired, reaped or
/// force-released, and for that period the bound was not held; or the
/// permit is a copy inherited across fork() (inherited()).
class SHMSEM_API PermitNotHeldError : public Error {
 public:
  explicit PermitNotHeldError(const std::string& what, bool inherited = false);
  /// True when the permit was not this process's to release: a copy
  /// inherited across fork(), whose seat stays with the parent. Dropping
  /// such a copy is normal; any other PermitNotHeldError means the bound
  /// was not held for a while.
  bool inherited() const noexcept { return inherited_; }

 private:
  bool inherited_;
};

/// extend() found that the seat was already lost.
class SHMSEM_API ExtensionError : public Error {
 public:
  explicit ExtensionError(const std::string& what);
};

/// The segment cannot be used: not a segment, wrong layout, truncated,
/// permission denied, no space, invalid key, or a system call failed.
class SHMSEM_API SegmentError : public Error {
 public:
  SegmentError(std::error_code code, const std::string& what);
};

}  // namespace shmsem

template <>
struct std::is_error_code_enum<shmsem::errc> : std::true_type {};
