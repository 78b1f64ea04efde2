// c_api.cpp: the C ABI (include/shmsem/shmsem.h) over the C++ API. Every
// function catches every exception and turns it into a status code and a
// per-thread message; nothing else happens here.
#include <shmsem/shmsem.h>
#include <shmsem/errors.hpp>
#include <shmsem/logging.hpp>
#include <shmsem/options.hpp>
#include <shmsem/permit.hpp>
#include <shmsem/semaphore.hpp>
#include <shmsem/version.hpp>

#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/forking.hpp"

// Every handle starts with a word that says what it is while it lives.
// Freeing a handle (shmsem_release, shmsem_close, shmsem_cancel_token_free)
// destroys what it holds and sets the word to kFreed; the handle's own few
// bytes then wait in a per-thread quarantine before they go back to the
// allocator. Until then a second free, or a use after it, finds kFreed and
// fails with SHMSEM_EINVAL instead of touching memory that a later handle
// may reuse. After that it is undefined, as with free(3).
namespace {
constexpr std::uint32_t kFreed = 0x46524545;  // "FREE"
}  // namespace

struct shmsem_sem {
  static constexpr std::uint32_t kLive = 0x53454d31;  // "SEM1"
  static constexpr const char* kWhat = "shmsem_sem";
  static constexpr const char* kFreedBy = "closed";
  explicit shmsem_sem(shmsem::Semaphore s) : sem(std::move(s)) {}
  std::uint32_t magic = kLive;
  std::optional<shmsem::Semaphore> sem;
};

struct shmsem_permit {
  static constexpr std::uint32_t kLive = 0x50524d31;  // "PRM1"
  static constexpr const char* kWhat = "shmsem_permit";
  static constexpr const char* kFreedBy = "released";
  explicit shmsem_permit(shmsem::Permit p) : permit(std::move(p)) {}
  std::uint32_t magic = kLive;
  std::optional<shmsem::Permit> permit;
};

struct shmsem_cancel_token {
  static constexpr std::uint32_t kLive = 0x544b4e31;  // "TKN1"
  static constexpr const char* kWhat = "shmsem_cancel_token";
  static constexpr const char* kFreedBy = "freed";
  std::uint32_t magic = kLive;
  std::optional<std::stop_source> source{std::in_place};
};

namespace {

using std::chrono::milliseconds;

template <class Handle>
bool live(const Handle* h) noexcept {
  return h && h->magic == Handle::kLive;
}

// Freed handles of this thread, oldest first out. On the heap: the
// library's static TLS must stay small (tests/c/static_tls.sh). A handle
// freed while the thread is exiting, after the quarantine is gone, is
// deleted at once.
class quarantine {
 public:
  quarantine() = default;
  quarantine(const quarantine&) = delete;
  quarantine& operator=(const quarantine&) = delete;
  ~quarantine() {
    gone = true;
    for (entry& e : ring_)
      if (e.handle) e.destroy(e.handle);
  }
  template <class Handle>
  void add(Handle* h) noexcept {
    entry& e = ring_[next_];
    if (e.handle) e.destroy(e.handle);
    e = {h, [](void* p) { delete static_cast<Handle*>(p); }};
    next_ = (next_ + 1) % ring_.size();
  }
  static thread_local bool gone;

 private:
  struct entry {
    void* handle = nullptr;
    void (*destroy)(void*) = nullptr;
  };
  // 64 handles of a few dozen bytes each: a second free within the
  // thread's next 64 frees is always caught.
  std::array<entry, 64> ring_{};
  std::size_t next_ = 0;
};
thread_local bool quarantine::gone = false;
thread_local std::unique_ptr<quarantine> freed_handles;

// Marks h freed (what it held is already destroyed) and quarantines it.
template <class Handle>
void retire(Handle* h) noexcept {
  h->magic = kFreed;
  if (!quarantine::gone && !freed_handles) {
    try {
      freed_handles = std::make_unique<quarantine>();
    } catch (const std::bad_alloc&) {
    }
  }
  if (quarantine::gone || !freed_handles)
    delete h;
  else
    freed_handles->add(h);
}

// The last failure's message, per thread (shmsem_last_error).
thread_local std::string last_error;

int fail(int code, std::string message) noexcept {
  try {
    last_error = std::move(message);
  } catch (...) {
    last_error.clear();  // out of memory: the code still says what happened
  }
  return code;
}

int code_of(shmsem::Reason r) {
  switch (r) {
    case shmsem::Reason::timeout:
      return SHMSEM_ETIMEDOUT;
    case shmsem::Reason::cancelled:
      return SHMSEM_ECANCELED;
    case shmsem::Reason::shutdown:
      return SHMSEM_ESHUTDOWN;
    case shmsem::Reason::exceeds_capacity:
      return SHMSEM_EEXCEEDS;
    case shmsem::Reason::error:
      return SHMSEM_ESEGMENT;
  }
  return SHMSEM_EUNKNOWN;
}

// The status of the exception being handled. Call only inside a catch.
int current_failure() noexcept {
  try {
    throw;
  } catch (const shmsem::AcquisitionError& e) {
    return fail(code_of(e.reason()), e.what());
  } catch (const shmsem::PermitNotHeldError& e) {
    return fail(SHMSEM_ENOTHELD, e.what());
  } catch (const shmsem::ExtensionError& e) {
    return fail(SHMSEM_EEXTEND, e.what());
  } catch (const shmsem::SegmentError& e) {
    if (e.code() == shmsem::make_error_code(shmsem::errc::untrusted_owner))
      return fail(SHMSEM_EUNTRUSTED, e.what());
    const bool missing = e.code() == shmsem::make_error_code(shmsem::errc::not_found);
    return fail(missing ? SHMSEM_ENOENT : SHMSEM_ESEGMENT, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(SHMSEM_EINVAL, e.what());
  } catch (const std::bad_alloc&) {
    return fail(SHMSEM_ENOMEM, "shmsem: out of memory");
  } catch (const std::exception& e) {
    return fail(SHMSEM_EUNKNOWN, e.what());
  } catch (...) {
    return fail(SHMSEM_EUNKNOWN, "shmsem: unknown exception");
  }
}

// Runs f, which returns a status or a figure; exceptions become codes.
template <class F>
auto guarded(F&& f) noexcept -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    return current_failure();
  }
}

int null_argument(const char* function, const char* name) {
  return fail(SHMSEM_EINVAL, std::string("shmsem: ") + function + "(): " + name + " is NULL");
}

// The SHMSEM_EINVAL of a handle argument that is not live: NULL, freed
// already, or not a handle of this kind.
template <class Handle>
int bad_handle(const char* function, const char* name, const Handle* h) {
  if (!h) return null_argument(function, name);
  const std::string head = std::string("shmsem: ") + function + "(): " + name;
  if (h->magic == kFreed)
    return fail(SHMSEM_EINVAL, head + " was " + Handle::kFreedBy + " already: a " + Handle::kWhat +
                                   " may not be used after it is " + Handle::kFreedBy);
  return fail(SHMSEM_EINVAL,
              head + " is not a " + Handle::kWhat + " (freed long ago, or never one)");
}

// Ends a handle whose end returns nothing (close, free): NULL is a no-op;
// one freed already only leaves its message for shmsem_last_error().
template <class Handle, class Held>
void free_handle(Handle* h, std::optional<Held> Handle::*held, const char* function,
                 const char* name) {
  if (!h) return;
  if (!live(h)) {
    bad_handle(function, name, h);
    return;
  }
  (h->*held).reset();
  retire(h);
}

std::string key_of(const char* key) {
  return std::string("'") + key + "'";
}

// Reads a caller's option struct of `given` bytes into `out` (ours, of
// sizeof(T) bytes, already holding the defaults): a shorter struct is an
// older caller, whose missing fields keep their defaults; a longer one is a
// newer caller, accepted only if every byte we do not know is zero.
template <class T>
bool read_options(const T* in, T& out, std::size_t minimum, const char* function) {
  const std::size_t given = in->size;
  if (given < minimum) {
    fail(SHMSEM_EINVAL, std::string("shmsem: ") + function + "(): options size " +
                            std::to_string(given) + " is smaller than the first version's " +
                            std::to_string(minimum) + " (set .size with the _INIT macro)");
    return false;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (std::size_t i = sizeof(T); i < given; ++i) {
    if (bytes[i] != 0) {
      fail(SHMSEM_EINVAL, std::string("shmsem: ") + function + "(): options set a field that " +
                              "this library (" + shmsem::runtime_version() +
                              ") does not know, at byte " + std::to_string(i));
      return false;
    }
  }
  std::memcpy(&out, in, std::min(given, sizeof(T)));
  out.size = sizeof(T);
  return true;
}

// The sizes of the structs' first versions: a caller compiled against
// that header passes them, and its missing later fields keep their defaults.
constexpr std::size_t kOpenOptionsV1 =
    offsetof(shmsem_open_options, open_timeout_ms) + sizeof(int64_t);
constexpr std::size_t kAcquireOptionsV1 = sizeof(shmsem_acquire_options);

// Reads an acquire's arguments into n and ao (the cancel token's stop
// token included); SHMSEM_OK, or the failure to return.
int acquire_arguments(shmsem_sem* s, const shmsem_acquire_options* o, shmsem_cancel_token* cancel,
                      shmsem_permit** out, const char* function, int& n,
                      shmsem::AcquireOptions& ao) {
  if (out) *out = nullptr;
  if (!live(s)) return bad_handle(function, "s", s);
  if (!out) return null_argument(function, "out");
  n = 1;
  if (o) {
    shmsem_acquire_options v = SHMSEM_ACQUIRE_OPTIONS_INIT;
    if (!read_options(o, v, kAcquireOptionsV1, function)) return SHMSEM_EINVAL;
    if (v.n < 1 || v.n > static_cast<std::uint32_t>(shmsem::kMaxCapacity))
      return fail(SHMSEM_EINVAL, std::string("shmsem: ") + function + "() of " +
                                     key_of(s->sem->key().data()) + ": n must be 1.." +
                                     std::to_string(shmsem::kMaxCapacity) + ", got " +
                                     std::to_string(v.n));
    n = static_cast<int>(v.n);
    if (v.wait_timeout_ms >= 0) ao.wait_timeout = milliseconds(v.wait_timeout_ms);
    if (v.ttl_ms != SHMSEM_TTL_DEFAULT) {
      if (v.ttl_ms < 0)
        return fail(SHMSEM_EINVAL, std::string("shmsem: ") + function + "() of " +
                                       key_of(s->sem->key().data()) + ": negative ttl_ms " +
                                       std::to_string(v.ttl_ms));
      ao.ttl = milliseconds(v.ttl_ms);
    }
    if (v.auto_renew != SHMSEM_RENEW_DEFAULT) ao.auto_renew = v.auto_renew != 0;
  }
  if (cancel) {
    if (!live(cancel)) return bad_handle(function, "cancel", cancel);
    if (cancel->source->stop_requested())
      return fail(SHMSEM_ECANCELED, std::string("shmsem: cannot acquire ") + std::to_string(n) +
                                        " seat(s) of " + key_of(s->sem->key().data()) +
                                        ": cancelled before the call");
    ao.stop = cancel->source->get_token();
  }
  return SHMSEM_OK;
}

int acquire(shmsem_sem* s, const shmsem_acquire_options* o, shmsem_cancel_token* cancel,
            shmsem_permit** out, const char* function) {
  int n = 1;
  shmsem::AcquireOptions ao;
  if (const int rc = acquire_arguments(s, o, cancel, out, function, n, ao); rc != SHMSEM_OK)
    return rc;
  return guarded([&] {
    *out = new shmsem_permit(s->sem->acquire(n, ao));
    return SHMSEM_OK;
  });
}

// Asynchronous acquires (shmsem_acquire_async). A request that must wait
// gets a thread of its own: the wait blocks in a futex (or, on Redis, a
// condition variable) that no event loop can poll, and a binding's own
// pool (libuv's has 4 threads) must never be the one that waits. A
// sleeping thread costs a stack and nothing else. shmsem_close() ends a
// handle's requests and waits for their callbacks, so the handle outlives
// every thread that uses it.
struct async_request {
  const shmsem_sem* sem;
  std::stop_source stop;
};
// Never destroyed: a request's thread may still finish while the process
// runs its exit handlers.
struct async_registry {
  std::mutex mutex;  // taken around fork() (forking.hpp)
  std::condition_variable finished;
  std::list<async_request> requests;
};
async_registry& asyncs() {
  static auto* r = new async_registry;
  return *r;
}
// The handle whose callback runs on this thread: a shmsem_close() of it
// from inside the callback waits for its other requests only.
thread_local const shmsem_sem* in_callback = nullptr;

void finish_async(std::list<async_request>::iterator r) noexcept {
  async_registry& a = asyncs();
  std::lock_guard g(a.mutex);
  a.requests.erase(r);
  a.finished.notify_all();
}

// Cancels s's requests and waits until their callbacks have returned.
void end_async_acquires(const shmsem_sem* s) noexcept {
  async_registry& a = asyncs();
  std::vector<std::stop_source> stops;
  std::unique_lock lk(a.mutex);
  for (auto& r : a.requests)
    if (r.sem == s) stops.push_back(r.stop);
  if (stops.empty()) return;
  lk.unlock();
  // Outside the lock: a stop callback wakes the waiting thread, which
  // takes the lock to finish.
  for (auto& st : stops) st.request_stop();
  lk.lock();
  const std::ptrdiff_t own = in_callback == s ? 1 : 0;
  a.finished.wait(lk, [&] {
    return std::count_if(a.requests.begin(), a.requests.end(),
                         [&](const async_request& r) { return r.sem == s; }) <= own;
  });
}

// Sends the library's log lines to a C callback.
class callback_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  callback_sink(shmsem_log_fn fn, void* ctx) : fn_(fn), ctx_(ctx) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string text(msg.payload.data(), msg.payload.size());
    fn_(level_of(msg.level), text.c_str(), ctx_);
  }
  void flush_() override {}

 private:
  static int level_of(spdlog::level::level_enum l) {
    switch (l) {
      case spdlog::level::trace:
      case spdlog::level::debug:
        return SHMSEM_LOG_DEBUG;
      case spdlog::level::info:
        return SHMSEM_LOG_INFO;
      case spdlog::level::warn:
        return SHMSEM_LOG_WARN;
      default:
        return SHMSEM_LOG_ERROR;
    }
  }
  shmsem_log_fn fn_;
  void* ctx_;
};

}  // namespace

extern "C" {

const char* shmsem_strerror(int code) {
  switch (code) {
    case SHMSEM_OK:
      return "SHMSEM_OK: success";
    case SHMSEM_ETIMEDOUT:
      return "SHMSEM_ETIMEDOUT: timed out";
    case SHMSEM_EUNAVAILABLE:
      return "SHMSEM_EUNAVAILABLE: no seat free now";
    case SHMSEM_ENOTHELD:
      return "SHMSEM_ENOTHELD: the permit's seats were lost";
    case SHMSEM_EINVAL:
      return "SHMSEM_EINVAL: invalid argument";
    case SHMSEM_ESEGMENT:
      return "SHMSEM_ESEGMENT: the segment cannot be used";
    case SHMSEM_ECANCELED:
      return "SHMSEM_ECANCELED: cancelled";
    case SHMSEM_ESHUTDOWN:
      return "SHMSEM_ESHUTDOWN: shut down";
    case SHMSEM_EEXCEEDS:
      return "SHMSEM_EEXCEEDS: more seats than the capacity";
    case SHMSEM_EEXTEND:
      return "SHMSEM_EEXTEND: cannot extend a lost permit";
    case SHMSEM_EUNKNOWN:
      return "SHMSEM_EUNKNOWN: unexpected error";
    case SHMSEM_ENOMEM:
      return "SHMSEM_ENOMEM: out of memory";
    case SHMSEM_ENOENT:
      return "SHMSEM_ENOENT: no such semaphore";
    case SHMSEM_EUNTRUSTED:
      return "SHMSEM_EUNTRUSTED: the segment's owner is not trusted";
    case SHMSEM_EINPROGRESS:
      return "SHMSEM_EINPROGRESS: the acquire waits; its callback will say how it ended";
    default:
      return "unknown code";
  }
}

const char* shmsem_last_error(void) {
  return last_error.c_str();
}

const char* shmsem_version(void) {
  return shmsem::runtime_version();
}

int shmsem_open(const char* key, uint32_t permits, shmsem_sem** out) {
  return shmsem_open_ex(key, permits, nullptr, out);
}

int shmsem_open_ex(const char* key, uint32_t permits, const shmsem_open_options* o,
                   shmsem_sem** out) {
  if (out) *out = nullptr;
  if (!key) return null_argument("shmsem_open", "key");
  if (!out) return null_argument("shmsem_open", "out");
  shmsem_open_options v = SHMSEM_OPEN_OPTIONS_INIT;
  if (o && !read_options(o, v, kOpenOptionsV1, "shmsem_open_ex")) return SHMSEM_EINVAL;
  constexpr std::uint32_t known_flags =
      SHMSEM_OPEN_NOCREATE | SHMSEM_OPEN_FENCING | SHMSEM_OPEN_BARGING | SHMSEM_OPEN_FIFO;
  if (v.flags & ~known_flags)
    return fail(SHMSEM_EINVAL, "shmsem: shmsem_open_ex(" + key_of(key) + "): unknown flags " +
                                   std::to_string(v.flags & ~known_flags));
  if ((v.flags & SHMSEM_OPEN_BARGING) && (v.flags & SHMSEM_OPEN_FIFO))
    return fail(SHMSEM_EINVAL, "shmsem: shmsem_open_ex(" + key_of(key) +
                                   "): SHMSEM_OPEN_BARGING and SHMSEM_OPEN_FIFO together");
  if (v.session_timeout_ms < 0 || v.connect_timeout_ms < 0)
    return fail(SHMSEM_EINVAL, "shmsem: shmsem_open_ex(" + key_of(key) +
                                   "): negative session_timeout_ms or connect_timeout_ms");
  if (v.default_ttl_ms < 0)
    return fail(SHMSEM_EINVAL, "shmsem: shmsem_open_ex(" + key_of(key) +
                                   "): negative default_ttl_ms " +
                                   std::to_string(v.default_ttl_ms));
  if (!(v.flags & SHMSEM_OPEN_NOCREATE) &&
      permits > static_cast<std::uint32_t>(shmsem::kMaxCapacity))
    return fail(SHMSEM_EINVAL, "shmsem: open(" + key_of(key) + ") needs permits from 1 to " +
                                   std::to_string(shmsem::kMaxCapacity) + ", got " +
                                   std::to_string(permits));
  shmsem::Options options;
  options.mode = static_cast<mode_t>(v.mode ? v.mode : 0600);
  if (v.default_ttl_ms > 0) options.ttl = milliseconds(v.default_ttl_ms);
  options.auto_renew = v.default_auto_renew != 0;
  if (v.open_timeout_ms >= 0) options.open_timeout = milliseconds(v.open_timeout_ms);
  if (v.session_timeout_ms > 0) options.session_timeout = milliseconds(v.session_timeout_ms);
  if (v.connect_timeout_ms > 0) options.connect_timeout = milliseconds(v.connect_timeout_ms);
  options.fencing = (v.flags & SHMSEM_OPEN_FENCING) != 0;
  if (v.flags & SHMSEM_OPEN_BARGING) options.fairness = shmsem::Fairness::barging;
  if (v.flags & SHMSEM_OPEN_FIFO) options.fairness = shmsem::Fairness::fifo;
  return guarded([&] {
    // Copied here: the caller's array need outlive only the call.
    if (v.trusted_owners)
      for (const char* const* owner = v.trusted_owners; *owner; ++owner)
        options.trusted_owners.emplace_back(*owner);
    *out = new shmsem_sem((v.flags & SHMSEM_OPEN_NOCREATE)
                              ? shmsem::Semaphore::attach(key, options)
                              : shmsem::Semaphore::open(key, static_cast<int>(permits), options));
    return SHMSEM_OK;
  });
}

void shmsem_close(shmsem_sem* s) {
  if (live(s)) end_async_acquires(s);
  free_handle(s, &shmsem_sem::sem, "shmsem_close", "s");
}

int shmsem_remove(const char* key) {
  if (!key) return null_argument("shmsem_remove", "key");
  return guarded([&] { return shmsem::Semaphore::remove(key) ? 1 : 0; });
}

int shmsem_remove_if_unused(const char* key) {
  if (!key) return null_argument("shmsem_remove_if_unused", "key");
  return guarded([&] { return shmsem::Semaphore::remove_if_unused(key) ? 1 : 0; });
}

const char* shmsem_key(const shmsem_sem* s) {
  // The key is a std::string inside the attachment: NUL-terminated.
  return live(s) ? s->sem->key().data() : nullptr;
}

int shmsem_acquire(shmsem_sem* s, const shmsem_acquire_options* o, shmsem_permit** out) {
  return acquire(s, o, nullptr, out, "shmsem_acquire");
}

int shmsem_acquire_cancellable(shmsem_sem* s, const shmsem_acquire_options* o,
                               shmsem_cancel_token* cancel, shmsem_permit** out) {
  return acquire(s, o, cancel, out, "shmsem_acquire_cancellable");
}

int shmsem_acquire_async(shmsem_sem* s, const shmsem_acquire_options* o,
                         shmsem_cancel_token* cancel, shmsem_acquire_done_fn done, void* ctx,
                         shmsem_permit** out) {
  constexpr const char* function = "shmsem_acquire_async";
  int n = 1;
  shmsem::AcquireOptions ao;
  if (const int rc = acquire_arguments(s, o, cancel, out, function, n, ao); rc != SHMSEM_OK)
    return rc;
  if (!done) return null_argument(function, "done");
  // Shared memory answers without I/O: a free seat is taken on the
  // caller's thread at once. A round trip to a server would block the
  // caller (an event loop) for up to connect_timeout: it goes to the thread.
  const bool without_io = s->sem->capabilities().reads_without_io;
  if (ao.wait_timeout == milliseconds(0) || without_io) {
    const int rc = guarded([&] {
      std::optional<shmsem::Permit> p;
      if (ao.wait_timeout == milliseconds(0))
        p.emplace(s->sem->acquire(n, ao));
      else
        p = s->sem->try_acquire(n, ao);
      if (!p) return SHMSEM_EINPROGRESS;
      *out = new shmsem_permit(std::move(*p));
      return SHMSEM_OK;
    });
    if (rc != SHMSEM_EINPROGRESS) return rc;
  }
  shmsem::detail::handle_fork_once();
  return guarded([&] {
    std::list<async_request>::iterator r;
    {
      async_registry& a = asyncs();
      std::lock_guard g(a.mutex);
      r = a.requests.insert(a.requests.end(), async_request{s, {}});
    }
    // The caller's token stops the request through its own stop source,
    // which shmsem_close() can stop too.
    const std::stop_token caller = ao.stop;
    ao.stop = r->stop.get_token();
    try {
      std::thread([s, r, n, ao, caller, done, ctx] {
        shmsem_permit* permit = nullptr;
        int status;
        {
          std::stop_callback link(caller, [src = r->stop]() mutable { src.request_stop(); });
          status = guarded([&] {
            permit = new shmsem_permit(s->sem->acquire(n, ao));
            return SHMSEM_OK;
          });
        }
        in_callback = s;
        done(status, permit, ctx);
        in_callback = nullptr;
        finish_async(r);
      }).detach();
    } catch (...) {
      finish_async(r);
      throw;
    }
    return SHMSEM_EINPROGRESS;
  });
}

int shmsem_try_acquire(shmsem_sem* s, uint32_t n, shmsem_permit** out) {
  if (out) *out = nullptr;
  if (!live(s)) return bad_handle("shmsem_try_acquire", "s", s);
  if (!out) return null_argument("shmsem_try_acquire", "out");
  if (n < 1)
    return fail(SHMSEM_EINVAL, "shmsem: shmsem_try_acquire() of " + key_of(shmsem_key(s)) +
                                   " needs n >= 1, got 0");
  if (n > static_cast<std::uint32_t>(shmsem::kMaxCapacity))
    n = static_cast<std::uint32_t>(shmsem::kMaxCapacity) + 1;  // never fits: unavailable
  return guarded([&] {
    std::optional<shmsem::Permit> p = s->sem->try_acquire(static_cast<int>(n));
    if (!p) {
      const std::string seats = std::to_string(n) + (n == 1 ? " seat" : " seats");
      return fail(SHMSEM_EUNAVAILABLE, "shmsem: try_acquire of " + seats + " of " +
                                           key_of(shmsem_key(s)) + ": not free now (capacity " +
                                           std::to_string(s->sem->capacity()) + ", used " +
                                           std::to_string(s->sem->used()) + ", waiting " +
                                           std::to_string(s->sem->waiters()) + ")");
    }
    *out = new shmsem_permit(std::move(*p));
    return SHMSEM_OK;
  });
}

int shmsem_cancel_token_new(shmsem_cancel_token** out) {
  if (!out) return null_argument("shmsem_cancel_token_new", "out");
  *out = nullptr;
  return guarded([&] {
    *out = new shmsem_cancel_token;
    return SHMSEM_OK;
  });
}

void shmsem_cancel_token_free(shmsem_cancel_token* t) {
  free_handle(t, &shmsem_cancel_token::source, "shmsem_cancel_token_free", "t");
}

int shmsem_cancel(shmsem_cancel_token* t) {
  if (!live(t)) return bad_handle("shmsem_cancel", "t", t);
  t->source->request_stop();
  return SHMSEM_OK;
}

int shmsem_cancel_token_reset(shmsem_cancel_token* t) {
  if (!live(t)) return bad_handle("shmsem_cancel_token_reset", "t", t);
  return guarded([&] {
    t->source.emplace();
    return SHMSEM_OK;
  });
}

int shmsem_cancel_token_cancelled(const shmsem_cancel_token* t) {
  if (!live(t)) return bad_handle("shmsem_cancel_token_cancelled", "t", t);
  return t->source->stop_requested() ? 1 : 0;
}

int shmsem_release(shmsem_permit* p) {
  if (!live(p)) return bad_handle("shmsem_release", "p", p);
  const int rc = guarded([&] {
    p->permit->release();
    return SHMSEM_OK;
  });
  p->permit.reset();  // always freed, even when the seats were lost
  retire(p);
  return rc;
}

int shmsem_extend(shmsem_permit* p, int64_t ttl_ms) {
  if (!live(p)) return bad_handle("shmsem_extend", "p", p);
  return guarded([&] {
    p->permit->extend(milliseconds(ttl_ms));
    return SHMSEM_OK;
  });
}

int shmsem_is_held(const shmsem_permit* p) {
  if (!live(p)) return bad_handle("shmsem_is_held", "p", p);
  return p->permit->is_held() ? 1 : 0;
}

uint64_t shmsem_permit_id(const shmsem_permit* p) {
  return live(p) ? p->permit->id() : 0;
}

int shmsem_permit_weight(const shmsem_permit* p) {
  if (!live(p)) return bad_handle("shmsem_permit_weight", "p", p);
  return p->permit->weight();
}

uint64_t shmsem_permit_fencing_token(const shmsem_permit* p) {
  return live(p) ? p->permit->fencing_token() : 0;
}

int64_t shmsem_capacity(const shmsem_sem* s) {
  if (!live(s)) return bad_handle("shmsem_capacity", "s", s);
  return s->sem->capacity();
}

int64_t shmsem_used(const shmsem_sem* s) {
  if (!live(s)) return bad_handle("shmsem_used", "s", s);
  return s->sem->used();
}

int64_t shmsem_available(const shmsem_sem* s) {
  if (!live(s)) return bad_handle("shmsem_available", "s", s);
  return s->sem->available();
}

int64_t shmsem_waiters(const shmsem_sem* s) {
  if (!live(s)) return bad_handle("shmsem_waiters", "s", s);
  return s->sem->waiters();
}

int shmsem_is_barging(const shmsem_sem* s) {
  if (!live(s)) return bad_handle("shmsem_is_barging", "s", s);
  return s->sem->fairness() == shmsem::Fairness::barging ? 1 : 0;
}

int shmsem_capabilities(const shmsem_sem* s) {
  if (!live(s)) return bad_handle("shmsem_capabilities", "s", s);
  const shmsem::Capabilities c = s->sem->capabilities();
  return (c.reads_without_io ? SHMSEM_CAP_READS_WITHOUT_IO : 0) |
         (c.barging ? SHMSEM_CAP_BARGING : 0) | (c.fencing ? SHMSEM_CAP_FENCING : 0) |
         (c.process_liveness ? SHMSEM_CAP_PROCESS_LIVENESS : 0) |
         (c.segment_file ? SHMSEM_CAP_SEGMENT_FILE : 0);
}

int shmsem_get_stats(const shmsem_sem* s, shmsem_stats* out) {
  if (!live(s)) return bad_handle("shmsem_get_stats", "s", s);
  if (!out) return null_argument("shmsem_get_stats", "out");
  const std::size_t want = out->size;
  if (want < offsetof(shmsem_stats, acquired))
    return fail(SHMSEM_EINVAL, "shmsem: shmsem_get_stats(): out->size " + std::to_string(want) +
                                   " is too small (set it to sizeof(shmsem_stats))");
  return guarded([&] {
    const shmsem::Stats st = s->sem->stats();
    shmsem_stats v{};
    v.acquired = st.acquired;
    v.released = st.released;
    v.timeouts = st.timeouts;
    v.cancelled = st.cancelled;
    v.shutdowns = st.shutdowns;
    v.rejected = st.rejected;
    v.try_failures = st.try_failures;
    v.reaped = st.reaped;
    v.expired = st.expired;
    v.force_released = st.force_released;
    v.reclaimed_seats = st.reclaimed_seats;
    v.recoveries = st.recoveries;
    // A newer caller's struct: the fields this library does not know read 0.
    const std::size_t n = std::min(want, sizeof v);
    v.size = static_cast<std::uint32_t>(want);
    std::memcpy(out, &v, n);
    if (want > n) std::memset(reinterpret_cast<unsigned char*>(out) + n, 0, want - n);
    return SHMSEM_OK;
  });
}

int shmsem_holders(const shmsem_sem* s, shmsem_holder* out, size_t max, size_t elem_size) {
  if (!live(s)) return bad_handle("shmsem_holders", "s", s);
  if (max > 0 && !out) return null_argument("shmsem_holders", "out");
  if (max > 0 && elem_size < offsetof(shmsem_holder, state))
    return fail(SHMSEM_EINVAL, "shmsem: shmsem_holders(): elem_size " + std::to_string(elem_size) +
                                   " is too small (pass sizeof(shmsem_holder))");
  return guarded([&] {
    const auto all = s->sem->holders();
    auto ns = [](std::chrono::steady_clock::time_point t) -> std::int64_t {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    };
    for (std::size_t i = 0; i < all.size() && i < max; ++i) {
      const shmsem::Holder& h = all[i];
      shmsem_holder v{};
      v.pid = h.pid;
      v.weight = h.weight;
      v.permit_id = h.permit_id;
      v.acquired_ns = ns(h.acquired_at);
      v.expires_ns = h.expires_at ? ns(*h.expires_at) : 0;
      v.state = h.state == shmsem::HolderState::alive  ? SHMSEM_HOLDER_ALIVE
                : h.state == shmsem::HolderState::dead ? SHMSEM_HOLDER_DEAD
                                                       : SHMSEM_HOLDER_EXPIRED;
      v.foreign_namespace = h.foreign_namespace ? 1 : 0;
      const std::size_t host_len = std::min(h.host.size(), sizeof v.host - 1);
      std::memcpy(v.host, h.host.data(), host_len);  // v is zeroed: NUL-terminated
      auto* dst = reinterpret_cast<unsigned char*>(out) + i * elem_size;
      const std::size_t n = std::min(elem_size, sizeof v);
      std::memcpy(dst, &v, n);
      if (elem_size > n) std::memset(dst + n, 0, elem_size - n);
    }
    return static_cast<int>(all.size());
  });
}

int shmsem_set_capacity(shmsem_sem* s, uint32_t permits) {
  if (!live(s)) return bad_handle("shmsem_set_capacity", "s", s);
  if (permits > static_cast<std::uint32_t>(shmsem::kMaxCapacity))
    return fail(SHMSEM_EINVAL, "shmsem: set_capacity() of " + key_of(shmsem_key(s)) + " needs 1.." +
                                   std::to_string(shmsem::kMaxCapacity) + ", got " +
                                   std::to_string(permits));
  return guarded([&] {
    s->sem->set_capacity(static_cast<int>(permits));
    return SHMSEM_OK;
  });
}

int shmsem_force_release_all(shmsem_sem* s) {
  if (!live(s)) return bad_handle("shmsem_force_release_all", "s", s);
  return guarded([&] { return s->sem->force_release_all(); });
}

int shmsem_reap(shmsem_sem* s) {
  if (!live(s)) return bad_handle("shmsem_reap", "s", s);
  return guarded([&] { return s->sem->reap(); });
}

int shmsem_wait_idle(shmsem_sem* s, int64_t timeout_ms) {
  if (!live(s)) return bad_handle("shmsem_wait_idle", "s", s);
  if (timeout_ms > shmsem::kMaxDuration.count()) timeout_ms = shmsem::kMaxDuration.count();
  return guarded([&] { return s->sem->wait_idle(milliseconds(timeout_ms)) ? 1 : 0; });
}

int shmsem_shutdown(shmsem_sem* s) {
  if (!live(s)) return bad_handle("shmsem_shutdown", "s", s);
  return guarded([&] {
    s->sem->shutdown();
    return SHMSEM_OK;
  });
}

void shmsem_shutdown_all(void) {
  guarded([] {
    shmsem::shutdown_all();
    return SHMSEM_OK;
  });
}

int shmsem_set_log_handler(shmsem_log_fn fn, void* ctx, int min_level) {
  return guarded([&] {
    if (!fn) {
      shmsem::set_logger(nullptr);
      return SHMSEM_OK;
    }
    auto logger =
        std::make_shared<spdlog::logger>("shmsem", std::make_shared<callback_sink>(fn, ctx));
    logger->set_level(min_level <= SHMSEM_LOG_DEBUG  ? spdlog::level::debug
                      : min_level == SHMSEM_LOG_INFO ? spdlog::level::info
                      : min_level == SHMSEM_LOG_WARN ? spdlog::level::warn
                                                     : spdlog::level::err);
    shmsem::set_logger(std::move(logger));
    return SHMSEM_OK;
  });
}

}  // extern "C"

namespace shmsem::detail {

void lock_async_acquires_for_fork() noexcept {
  asyncs().mutex.lock();
}

void unlock_async_acquires_after_fork(bool child) noexcept {
  async_registry& a = asyncs();
  // The child has none of the threads that served these requests.
  if (child) a.requests.clear();
  a.mutex.unlock();
}

}  // namespace shmsem::detail
