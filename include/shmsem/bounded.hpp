// shmsem/bounded.hpp: bounded(), which wraps a callable so that every call
// holds one seat of a fleet-wide semaphore while it runs.
//
//   auto encode = shmsem::bounded({.key = "video:encode", .permits = 2, .ttl = 600s},
//                                 [&](const std::string& id) { encoder.encode(id); });
//   encode("v1");   // returns bool: true when the body ran
//
//   auto export_tenant = shmsem::bounded(
//       {.key = "export:{0}", .permits = 1, .wait_timeout = 5s,
//        .on_unavailable = shmsem::OnUnavailable::skip},
//       [&](const std::string& tenant) { return run_export(tenant); });
//   std::optional<Report> r = export_tenant("acme");   // nullopt: skipped
//
// A call returns std::optional<R> for a callable returning R (bool for
// void): engaged (true) when the body ran, empty (false) when it was
// skipped under OnUnavailable::skip. With the default policy it is always
// engaged, since failures throw. A callable returning a reference is
// rejected at compile time (return a pointer or std::reference_wrapper).
//
// Keys: a template where {n} is the n-th argument formatted with fmt ({{ and
// }} are literal braces; {n:spec} takes an fmt spec), or a callable taking the
// (const) arguments and returning the key. A template formats each argument
// as the body receives it: converted to the callable's parameter type, once,
// and that converted value is what the body gets. So f(3), f(3.7) and f(3.2)
// with an int parameter are all calls for key "...3", and 'A' and 65 for a
// char parameter are both "A". A template is checked when bounded() is
// called: an index beyond the callable's parameters, a parameter type fmt
// cannot format, a format spec that does not fit the parameter type
// ("{0:d}" for a string), `{}` without an index, or unbalanced braces throw
// std::invalid_argument. Checking needs the parameter types, so a template
// with placeholders and a generic callable (auto parameters) is rejected
// too; give the parameters types or use a key callable. A key callable needs
// BoundedOptions spelled out, for class template argument deduction:
// bounded(shmsem::BoundedOptions{.key = [](int id) { ... }}, fn).
//
// The wrapper is copyable (if the callable is) and may be called from many
// threads at once. It uses Service::instance() unless options.service is set.
#pragma once

#include <shmsem/errors.hpp>
#include <shmsem/export.hpp>
#include <shmsem/options.hpp>
#include <shmsem/permit.hpp>
#include <shmsem/semaphore.hpp>
#include <shmsem/service.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace shmsem {

/// What a call does when it cannot get its seat: saturation, timeout,
/// cancellation, a segment that cannot be used (under fail_closed), shutdown.
enum class OnUnavailable {
  throw_error,  ///< AcquisitionError propagates (the default)
  skip,         ///< the call returns an empty optional (false for void) without running
};

/// What a call does when the semaphore's segment cannot be opened at all
/// (permission denied, /dev/shm read-only or full, a corrupt file). A
/// segment of an untrusted owner (errc::untrusted_owner) is always treated
/// as fail_closed: any local user can create a key's file first, and must
/// not be able to switch the bound off that way.
enum class FailMode {
  fail_open,    ///< run the body without a bound; warn once per key (the default)
  fail_closed,  ///< treat it as unavailable: AcquisitionError with Reason::error
};

/// OnUnavailable, or a callable (std::string_view key, Reason reason) that
/// maps the failure to the caller's own error by throwing it. If the
/// callable returns instead, the original AcquisitionError propagates.
class SHMSEM_API UnavailablePolicy {
 public:
  UnavailablePolicy(OnUnavailable mode = OnUnavailable::throw_error) noexcept : mode_(mode) {}
  template <class F>
  requires(std::is_invocable_v<const F&, std::string_view, Reason> &&
           !std::is_convertible_v<F, OnUnavailable>) UnavailablePolicy(F map)
      : mode_(OnUnavailable::throw_error), map_(std::move(map)) {}

  bool skips() const noexcept { return mode_ == OnUnavailable::skip; }

  /// True for the default policy (throw_error without a mapping callable):
  /// the only one under which a call without a wait_timeout waits.
  bool throws_as_is() const noexcept { return mode_ == OnUnavailable::throw_error && !map_; }

  /// Applies the policy to a failed acquisition of `key`: returns for skip,
  /// otherwise throws (the mapped error, or `error`; `error_is_current` says
  /// that `error` is the exception being handled, so it is rethrown as is).
  void apply(std::string_view key, const AcquisitionError& error, bool error_is_current) const;

 private:
  OnUnavailable mode_;
  std::function<void(std::string_view, Reason)> map_;
};

/// Options of bounded(). Key is std::string for templates; CTAD picks a
/// callable's type when BoundedOptions{...} is spelled out.
template <class Key = std::string>
struct BoundedOptions {
  /// The semaphore key: a template ("export:{0}") or a callable.
  Key key;
  /// Capacity used when a call creates the semaphore. Use the same value
  /// everywhere the key is used; an existing semaphore keeps its capacity.
  int permits = 1;
  /// Lease TTL of each call's seat; nullopt: the service's default (none).
  std::optional<std::chrono::milliseconds> ttl;
  /// Wait budget per call. nullopt: under the default on_unavailable
  /// (throw_error) waits until a seat is free; under skip or a mapping
  /// callable makes one attempt without waiting, since such a caller
  /// expects to go without a seat at times. Zero or negative (however
  /// large): one attempt, no wait.
  std::optional<std::chrono::milliseconds> wait_timeout;
  /// Renew the lease in the background while the body runs (needs a TTL).
  std::optional<bool> auto_renew;
  UnavailablePolicy on_unavailable;
  FailMode fail_mode = FailMode::fail_open;
  /// The Service whose cached handles the calls use; nullptr:
  /// Service::instance(). Must outlive the wrapper.
  Service* service = nullptr;
};

namespace detail {

/// Throws (fmt::format_error, or another std::exception) when `spec`, the
/// text after ':' in a placeholder, is not a format spec of one type.
using spec_check_fn = void (*)(std::string_view spec);

/// A parsed key template.
struct SHMSEM_API key_template {
  /// Parses `text`; throws std::invalid_argument for `{}`, a non-numeric or
  /// too large index (64 and above), or unbalanced braces.
  explicit key_template(std::string text);
  std::string text;                                // as given, for fmt
  std::string literal;                             // the key when there is no placeholder
  std::uint64_t referenced = 0;                    // bit n: {n} occurs
  int max_index = -1;                              // -1: no placeholder
  std::vector<std::pair<int, std::string>> specs;  // {n:spec}: (n, spec)
  /// Throws std::invalid_argument unless every placeholder names one of
  /// `arity` arguments that fmt can format (formattable[n]). arity < 0:
  /// parameter types unknown (a generic callable).
  void check(int arity, const bool* formattable) const;
  /// Throws std::invalid_argument unless each {n:spec} fits argument n's
  /// type (checks[n]). Precondition: check() passed with known types.
  void check_specs(const spec_check_fn* checks) const;
};

/// fmt::vformat(text, args); an fmt error becomes std::invalid_argument.
SHMSEM_API std::string format_key(std::string_view text, fmt::format_args args);

/// Throws std::invalid_argument: a placeholder of `text` names an argument
/// that is missing or that fmt cannot format.
[[noreturn]] SHMSEM_API void unformattable_arguments(std::string_view text);

/// Logs the fail-open warning for `key`, once per key per process.
SHMSEM_API void warn_fail_open(std::string_view key, const std::exception_ptr& cause) noexcept;

/// The AcquisitionError for a segment that could not be opened under
/// fail_closed (Reason::error, or Reason::shutdown after shutdown()).
SHMSEM_API AcquisitionError unopenable(std::string_view key, const std::exception_ptr& cause);

// Parameter types of a callable with one non-template call signature.
template <class T, class = void>
struct params {
  static constexpr bool known = false;
};
template <class R, class... A>
struct params<R (*)(A...)> {
  static constexpr bool known = true;
  using types = std::tuple<A...>;
};
template <class R, class... A>
struct params<R (*)(A...) noexcept> : params<R (*)(A...)> {};
template <class R, class C, class... A>
struct params<R (C::*)(A...)> : params<R (*)(A...)> {};
template <class R, class C, class... A>
struct params<R (C::*)(A...) const> : params<R (*)(A...)> {};
template <class R, class C, class... A>
struct params<R (C::*)(A...) noexcept> : params<R (*)(A...)> {};
template <class R, class C, class... A>
struct params<R (C::*)(A...) const noexcept> : params<R (*)(A...)> {};
template <class R, class C, class... A>
struct params<R (C::*)(A...)&> : params<R (*)(A...)> {};
template <class R, class C, class... A>
struct params<R (C::*)(A...) const&> : params<R (*)(A...)> {};
template <class F>
struct params<F, std::void_t<decltype(&F::operator())>> : params<decltype(&F::operator())> {};

template <class T>
inline constexpr bool formattable_v = fmt::is_formattable<std::remove_cvref_t<T>>::value;

template <class Tuple>
struct formattable_table;
template <class... A>
struct formattable_table<std::tuple<A...>> {
  static constexpr bool value[sizeof...(A) + 1] = {formattable_v<A>..., false};
};

template <class Formatter>
void parse_spec(std::string_view spec) {
  // fmt hands a formatter the spec up to the end of the string, closing
  // brace included.
  const std::string text = std::string(spec) + "}";
  fmt::format_parse_context ctx(text);
  Formatter f;
  const auto it = f.parse(ctx);
  if (it == ctx.end() || *it != '}') throw std::invalid_argument("invalid format specifier");
}

// Parses a spec with the formatter fmt uses for T, which rejects one that
// does not fit (a type, precision or sign the type does not take).
template <class T>
void check_spec(std::string_view spec) {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::is_default_constructible_v<fmt::formatter<U, char>>) {
    parse_spec<fmt::formatter<U, char>>(spec);
  } else if constexpr (std::is_enum_v<U>) {
    check_spec<std::underlying_type_t<U>>(spec);  // fmt formats it as its number
  } else if constexpr (std::is_convertible_v<const U&, fmt::string_view>) {
    parse_spec<fmt::formatter<fmt::string_view, char>>(spec);
  }
  // Otherwise fmt formats U by a route this cannot see; a bad spec then
  // throws at the call.
}

template <class Tuple>
struct spec_check_table;
template <class... A>
struct spec_check_table<std::tuple<A...>> {
  static constexpr spec_check_fn value[sizeof...(A) + 1] = {&check_spec<A>..., nullptr};
};

// Argument I of a call as the body receives it. An argument that already
// has the parameter's type, or that a reference parameter binds to as its
// base, is passed on as it came; any other is converted once, here, so that
// the key is formatted from the very value the body gets.
template <class P, class A>
inline constexpr bool passes_as_is_v =
    std::is_same_v<std::remove_cvref_t<P>, std::remove_cvref_t<A>> ||
    (std::is_reference_v<P> && std::is_base_of_v<std::remove_cvref_t<P>, std::remove_cvref_t<A>>);

template <class T>
T implicitly(std::type_identity_t<T> v) {
  return v;  // copy-initialization: the conversion the call itself would make
}

template <class P, class A>
struct passed_as_is {
  explicit passed_as_is(A&& a) : ref(std::forward<A>(a)) {}
  A&& ref;
  const std::remove_cvref_t<P>& view() const { return ref; }
  A&& pass() { return std::forward<A>(ref); }
};
template <class P, class A>
struct converted_once {
  explicit converted_once(A&& a) : value(implicitly<std::remove_cvref_t<P>>(std::forward<A>(a))) {}
  std::remove_cvref_t<P> value;
  const std::remove_cvref_t<P>& view() const { return value; }
  std::remove_cvref_t<P>&& pass() { return std::move(value); }
};
template <class P, class A>
using received = std::conditional_t<passes_as_is_v<P, A>, passed_as_is<P, A>, converted_once<P, A>>;

template <class F, std::size_t I>
using param_t = std::tuple_element_t<I, typename params<F>::types>;

// An argument as fmt sees it; arguments fmt cannot format are never named
// by a checked template and stand in as 0.
template <class T>
decltype(auto) format_view(const T& v) {
  if constexpr (formattable_v<T>)
    return (v);
  else
    return 0;
}

// Everything a wrapper's copies share.
template <class Key>
struct bounded_state {
  Key key;  // key_template, or the user's key callable
  int permits;
  AcquireOptions acquire;
  UnavailablePolicy on_unavailable;
  FailMode fail_mode;
  Service* service;
};

}  // namespace detail

/// The callable bounded() returns. Calling it with args: makes the key,
/// takes one seat of it through the Service (blocking up to wait_timeout),
/// runs fn(args...) and always releases the seat, also when fn throws (fn's
/// exception propagates unchanged; a seat lost meanwhile is logged, not
/// thrown). Returns std::optional<R> (bool for void), empty when skipped.
/// Acquisition failures follow on_unavailable; a segment that cannot be
/// opened follows fail_mode. std::invalid_argument (bad key, permits) always
/// propagates.
template <class F, class Key>
class Bounded {
 public:
  Bounded(std::shared_ptr<const detail::bounded_state<Key>> state, F fn)
      : state_(std::move(state)), fn_(std::move(fn)) {}

  template <class... Args>
  requires std::is_invocable_v<const F&, Args&&...>
  auto operator()(Args&&... args) const { return call(fn_, std::forward<Args>(args)...); }
  template <class... Args>
  requires(std::is_invocable_v<F&, Args&&...> && !std::is_invocable_v<const F&, Args&&...>) auto
  operator()(Args&&... args) {
    return call(fn_, std::forward<Args>(args)...);
  }

 private:
  template <class Fn, class... Args>
  static auto run(Fn& fn, Args&&... args) {
    using R = std::invoke_result_t<Fn&, Args&&...>;
    if constexpr (std::is_void_v<R>) {
      std::invoke(fn, std::forward<Args>(args)...);
      return true;
    } else {
      return std::optional<R>(std::invoke(fn, std::forward<Args>(args)...));
    }
  }

  template <class Fn, class... Args>
  auto call(Fn& fn, Args&&... args) const {
    using R = std::invoke_result_t<Fn&, Args&&...>;
    static_assert(!std::is_reference_v<R>,
                  "shmsem::bounded: the callable returns a reference; return a pointer or "
                  "std::reference_wrapper instead");
    const auto& st = *state_;
    if constexpr (std::is_same_v<Key, detail::key_template>) {
      // The hot path: no allocation for a fixed key.
      if (st.key.max_index < 0)
        return hold_and_run(fn, st.key.literal, std::forward<Args>(args)...);
      if constexpr (detail::params<F>::known) {
        return call_converted(fn, std::index_sequence_for<Args...>{}, std::forward<Args>(args)...);
      } else {
        // bounded() refused placeholders without parameter types.
        detail::unformattable_arguments(st.key.text);
      }
    } else {
      const std::string key(std::invoke(st.key, std::as_const(args)...));
      return hold_and_run(fn, key, std::forward<Args>(args)...);
    }
  }

  template <class Fn, std::size_t... I, class... Args>
  auto call_converted(Fn& fn, std::index_sequence<I...>, Args&&... args) const {
    const auto& st = *state_;
    // A callable whose operator() has default arguments may get fewer
    // arguments than bounded() checked the template against.
    constexpr std::uint64_t given =
        sizeof...(Args) >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << sizeof...(Args)) - 1;
    if ((st.key.referenced & ~given) != 0) detail::unformattable_arguments(st.key.text);
    std::tuple<detail::received<detail::param_t<F, I>, Args>...> received(
        std::forward<Args>(args)...);
    const std::string key = std::apply(
        [&](const auto&... r) {
          return [&](const auto&... a) {
            return detail::format_key(st.key.text, fmt::make_format_args(a...));
          }(detail::format_view(r.view())...);
        },
        received);
    return std::apply([&](auto&... r) { return hold_and_run(fn, key, r.pass()...); }, received);
  }

  // Takes the seat of `key`, runs fn(args...) and releases.
  template <class Fn, class... Args>
  auto hold_and_run(Fn& fn, std::string_view key, Args&&... args) const {
    using R = std::invoke_result_t<Fn&, Args&&...>;
    using Result = std::conditional_t<std::is_void_v<R>, bool, std::optional<R>>;
    const auto& st = *state_;
    Service& svc = st.service ? *st.service : Service::instance();
    std::shared_ptr<Semaphore> sem;
    try {
      sem = svc.semaphore(key, st.permits);
    } catch (const SegmentError& e) {
      if (st.fail_mode == FailMode::fail_open && e.code() != errc::untrusted_owner &&
          !shutdown_requested()) {
        detail::warn_fail_open(key, std::current_exception());
        return run(fn, std::forward<Args>(args)...);
      }
      st.on_unavailable.apply(key, detail::unopenable(key, std::current_exception()), false);
      return Result{};
    }

    Permit permit;
    try {
      permit = sem->acquire(1, st.acquire);
    } catch (const AcquisitionError& e) {
      st.on_unavailable.apply(key, e, true);
      return Result{};
    }
    struct releaser {
      Permit& p;
      ~releaser() { detail::release_after_work(p); }
    } guard{permit};
    return run(fn, std::forward<Args>(args)...);
  }

  std::shared_ptr<const detail::bounded_state<Key>> state_;
  F fn_;
};

namespace detail {

template <class F, class Key, class K>
auto make_bounded(Key key, const BoundedOptions<K>& o, F fn) {
  AcquireOptions acquire;
  acquire.ttl = o.ttl;
  // Negative means no wait: clamped here, before any arithmetic sees it.
  if (o.wait_timeout)
    acquire.wait_timeout = std::max(*o.wait_timeout, std::chrono::milliseconds::zero());
  else if (!o.on_unavailable.throws_as_is())
    acquire.wait_timeout = std::chrono::milliseconds::zero();
  acquire.auto_renew = o.auto_renew;
  auto state = std::make_shared<const bounded_state<Key>>(bounded_state<Key>{
      std::move(key), o.permits, std::move(acquire), o.on_unavailable, o.fail_mode, o.service});
  return Bounded<F, Key>(std::move(state), std::move(fn));
}

template <class F>
key_template checked_template(std::string text) {
  key_template t(std::move(text));
  if constexpr (params<F>::known) {
    using types = typename params<F>::types;
    t.check(static_cast<int>(std::tuple_size_v<types>), formattable_table<types>::value);
    t.check_specs(spec_check_table<types>::value);
  } else {
    t.check(-1, nullptr);
  }
  return t;
}

}  // namespace detail

/// Wraps fn with a key template (see the banner). Throws
/// std::invalid_argument now for a template the callable's arguments cannot
/// fill, or permits outside 1..kMaxCapacity. Does not touch any segment.
template <class F>
auto bounded(BoundedOptions<> options, F fn) {
  if (options.permits < 1 || options.permits > kMaxCapacity)
    throw std::invalid_argument("shmsem::bounded: permits must be in 1..kMaxCapacity");
  auto key = detail::checked_template<F>(std::move(options.key));
  return detail::make_bounded(std::move(key), options, std::move(fn));
}

/// Wraps fn with a key callable, or a template given as another string type.
template <class Key, class F>
requires(!std::is_same_v<Key, std::string>) auto bounded(BoundedOptions<Key> options, F fn) {
  if (options.permits < 1 || options.permits > kMaxCapacity)
    throw std::invalid_argument("shmsem::bounded: permits must be in 1..kMaxCapacity");
  if constexpr (std::is_convertible_v<const Key&, std::string_view>) {
    auto key = detail::checked_template<F>(std::string(std::string_view(options.key)));
    return detail::make_bounded(std::move(key), options, std::move(fn));
  } else {
    return detail::make_bounded(std::move(options.key), options, std::move(fn));
  }
}

}  // namespace shmsem
