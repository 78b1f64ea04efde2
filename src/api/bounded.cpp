// bounded.cpp: the non-template half of bounded(): key templates, the
// unavailable policy and the fail-open warning. Logging lives here so that
// spdlog stays out of the public headers.
#include <shmsem/bounded.hpp>
#include <shmsem/logging.hpp>

#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include <fmt/format.h>

#include "base/forking.hpp"

namespace shmsem {

void UnavailablePolicy::apply(std::string_view key, const AcquisitionError& error,
                              bool error_is_current) const {
  if (mode_ == OnUnavailable::skip) return;
  if (map_) map_(key, error.reason());  // throws the caller's own error
  // Called from the handler of `error`: rethrow the original object as is.
  if (error_is_current) std::rethrow_exception(std::current_exception());
  throw error;
}

namespace detail {

key_template::key_template(std::string t) : text(std::move(t)) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("shmsem::bounded: key template '" + text + "': " + why);
  };
  if (text.empty()) throw bad("the key is empty");
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '}') {
      if (i + 1 < text.size() && text[i + 1] == '}') {
        literal += '}';
        ++i;
        continue;
      }
      throw bad("unmatched '}' (write '}}' for a literal brace)");
    }
    if (c != '{') {
      literal += c;
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '{') {
      literal += '{';
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    int index = 0;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') {
      index = index * 10 + (text[j] - '0');
      if (index >= 64) throw bad("argument index above 63");
      ++j;
    }
    if (j == i + 1) throw bad("a placeholder needs an argument index, as in {0}");
    std::size_t spec_at = 0;
    if (j < text.size() && text[j] == ':') {
      // An fmt format spec; nested replacement fields are not supported.
      spec_at = ++j;
      while (j < text.size() && text[j] != '}') {
        if (text[j] == '{') throw bad("nested braces in a format spec");
        ++j;
      }
    }
    if (j >= text.size() || text[j] != '}') throw bad("unterminated placeholder");
    if (spec_at != 0) specs.emplace_back(index, text.substr(spec_at, j - spec_at));
    referenced |= std::uint64_t{1} << index;
    if (index > max_index) max_index = index;
    i = j;
  }
}

void key_template::check(int arity, const bool* formattable) const {
  if (max_index < 0) return;
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument("shmsem::bounded: key template '" + text + "': " + why);
  };
  if (arity < 0)
    bad("the callable's parameter types are unknown (a generic lambda?), so the placeholders "
        "cannot be checked; give the parameters types, or use a key callable");
  for (int n = 0; n <= max_index; ++n) {
    if (!(referenced & (std::uint64_t{1} << n))) continue;
    if (n >= arity)
      bad(fmt::format("{{{}}} names a missing argument (the callable takes {})", n, arity));
    if (!formattable[n]) bad(fmt::format("argument {} cannot be formatted by fmt", n));
  }
}

void key_template::check_specs(const spec_check_fn* checks) const {
  for (const auto& [index, spec] : specs) {
    try {
      checks[index](spec);
    } catch (const std::exception& e) {
      throw std::invalid_argument(
          fmt::format("shmsem::bounded: key template '{}': the format spec '{}' of {{{}}} does "
                      "not fit the type of argument {}: {}",
                      text, spec, index, index, e.what()));
    }
  }
}

std::string format_key(std::string_view text, fmt::format_args args) {
  try {
    return fmt::vformat(text, args);
  } catch (const fmt::format_error& e) {
    throw std::invalid_argument("shmsem::bounded: key template '" + std::string(text) +
                                "': " + e.what());
  }
}

void unformattable_arguments(std::string_view text) {
  throw std::invalid_argument("shmsem::bounded: key template '" + std::string(text) +
                              "' names an argument that is missing or cannot be formatted");
}

namespace {
std::mutex warned_mutex;  // taken around fork() (forking.hpp)
}  // namespace

void lock_warnings_for_fork() noexcept {
  warned_mutex.lock();
}

void unlock_warnings_after_fork() noexcept {
  warned_mutex.unlock();
}

void warn_fail_open(std::string_view key, const std::exception_ptr& cause) noexcept {
  try {
    handle_fork_once();
    static auto* warned = new std::unordered_set<std::string>();  // leaked: usable at exit
    {
      std::lock_guard lk(warned_mutex);
      if (!warned->emplace(key).second) return;
    }
    std::string why = "unknown error";
    try {
      if (cause) std::rethrow_exception(cause);
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    logger()->warn(
        "semaphore '{}' cannot be opened ({}); running without a bound (fail_open). "
        "This is logged once per key.",
        key, why);
  } catch (...) {
  }
}

AcquisitionError unopenable(std::string_view key, const std::exception_ptr& cause) {
  if (shutdown_requested())
    return AcquisitionError(Reason::shutdown,
                            "semaphore '" + std::string(key) + "': shutdown() was called", cause);
  std::string why = "unknown error";
  try {
    if (cause) std::rethrow_exception(cause);
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
  }
  return AcquisitionError(Reason::error,
                          "semaphore '" + std::string(key) + "' cannot be opened: " + why, cause);
}

}  // namespace detail
}  // namespace shmsem
