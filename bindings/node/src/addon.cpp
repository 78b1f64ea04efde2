// bindings/node/src/addon.cpp: the N-API addon under the npm package
// `shmsem`, a thin adapter over the C ABI (<shmsem/shmsem.h>), so that Node
// shares the waiting, cancellation and hand-back of shmsem_acquire_async
// with every other binding.
//
// What it defines (the JS layer in lib/ is the public API):
//   new Semaphore(key, permits, flags)   close, acquire, tryAcquire, handle,
//                                        figures, forceReleaseAll, shutdown
//   tryAcquire(semaphore's handle, n, ttl)
//   release, extend, isHeld, describe, dropped (of a permit's handle)
//   grant, grantTime                     who and when the last grant was
//   CancelToken                          cancel
//   remove(key), version()
//
// Rules it keeps:
//   - No input aborts the process: every argument is checked here as well as
//     in lib/, and a bad one throws a TypeError or RangeError. A failing call
//     throws an Error whose `shmsemCode` is the C ABI's code (lib/ turns it
//     into the typed error classes).
//   - A waiting acquire waits on the library's thread, never on the libuv
//     pool; its callback hands the outcome to the loop through a
//     napi_threadsafe_function created for that request.
//   - A handle is passed to the C ABI only while it is live: each wrapper
//     clears its pointer when it frees the handle, and a permit's handle is
//     looked up in the table of the permits held (permit_table).
#include <napi.h>

#include <shmsem/shmsem.h>

#include <time.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

// The error of a failed C ABI call, with the calling thread's last message.
Napi::Error shmsem_error(Napi::Env env, int code, const std::string& message) {
  Napi::Error e = Napi::Error::New(env, message.empty() ? shmsem_strerror(code) : message);
  e.Set("shmsemCode", Napi::Number::New(env, code));
  return e;
}

[[noreturn]] void throw_last(Napi::Env env, int code) {
  throw shmsem_error(env, code, shmsem_last_error());
}

[[noreturn]] void throw_type(Napi::Env env, const std::string& what) {
  throw Napi::TypeError::New(env, what);
}

[[noreturn]] void throw_range(Napi::Env env, const std::string& what) {
  throw Napi::RangeError::New(env, what);
}

// A number argument, else a TypeError. One N-API call: it runs on every
// acquire and release.
double number_arg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  double v = 0;
  if (i >= info.Length() || napi_get_value_double(info.Env(), info[i], &v) != napi_ok) {
    throw_type(info.Env(), std::string(name) + " must be a number");
  }
  return v;
}

// An integer argument in [lo, hi]: finite, whole, in range; else a typed error.
int64_t integer_arg(const Napi::CallbackInfo& info, size_t i, const char* name, int64_t lo,
                    int64_t hi) {
  Napi::Env env = info.Env();
  double v = number_arg(info, i, name);
  if (!std::isfinite(v) || std::trunc(v) != v || v < static_cast<double>(lo) ||
      v > static_cast<double>(hi)) {
    throw_range(env, std::string(name) + " must be an integer in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]");
  }
  return static_cast<int64_t>(v);
}

std::string string_arg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (i >= info.Length() || !info[i].IsString()) {
    throw_type(info.Env(), std::string(name) + " must be a string");
  }
  std::string s = info[i].As<Napi::String>().Utf8Value();
  // The C ABI takes NUL-terminated keys: an embedded NUL would cut the key.
  if (s.find('\0') != std::string::npos) {
    throw shmsem_error(info.Env(), SHMSEM_EINVAL, std::string(name) + " contains a NUL byte");
  }
  return s;
}

// Handles for JavaScript: a native object that JavaScript names by a number
// (slot and generation) rather than by a wrapped object. The permits this
// instance of the addon holds live here: an object per grant, with its
// weak reference and its finalizer queued and drained, cost several times
// the grant itself (lib/service.js watches for a Permit collected
// unreleased and gives its seats back through dropped()). So do the open
// semaphores, for the calls of every acquire and release, which as plain
// functions skip the lookup of a wrapped object's native half. A handle
// that was taken back, never given, or is of an earlier generation of its
// slot names nothing: it is refused, never followed.
template <class T>
class handle_table {
 public:
  handle_table() = default;
  handle_table(const handle_table&) = delete;
  handle_table& operator=(const handle_table&) = delete;

  // Adds p and returns its handle; throws (SHMSEM_ENOMEM) when the table
  // is full or memory is short, and p stays the caller's.
  double add(Napi::Env env, T* p) {
    if (free_.empty()) {
      if (slots_.size() >= kMaxSlots) {
        throw shmsem_error(env, SHMSEM_ENOMEM,
                           "shmsem: more than " + std::to_string(kMaxSlots) +
                               " handles in use at once in one JavaScript environment");
      }
      // Room in free_ for every slot, so that take() never allocates.
      free_.reserve(slots_.size() + 1);
      generation_.push_back(1);
      slots_.push_back(nullptr);
      free_.push_back(static_cast<uint32_t>(slots_.size() - 1));
    }
    uint32_t slot = free_.back();
    free_.pop_back();
    slots_[slot] = p;
    return static_cast<double>(generation_[slot]) * kSlotSpan + slot;
  }

  // What a handle names now, or nullptr.
  T* find(double handle) const noexcept {
    uint32_t slot = 0;
    return locate(handle, slot) ? slots_[slot] : nullptr;
  }

  // Forgets what a handle names and returns it, or nullptr. The handle
  // names nothing from here on (until its slot's generation wraps, after
  // 2^32 uses of that slot).
  T* take(double handle) noexcept {
    uint32_t slot = 0;
    if (!locate(handle, slot)) {
      return nullptr;
    }
    T* p = slots_[slot];
    slots_[slot] = nullptr;
    generation_[slot] = generation_[slot] == UINT32_MAX ? 1 : generation_[slot] + 1;
    free_.push_back(slot);
    return p;
  }

  // Everything the table still names.
  const std::vector<T*>& slots() const noexcept { return slots_; }

 private:
  static constexpr uint32_t kMaxSlots = 1u << 21;
  static constexpr double kSlotSpan = kMaxSlots;
  // Generations are 32 bits, so every handle is below 2^53: exact as a
  // JavaScript number.
  static constexpr double kEndHandle = 4294967296.0 * kSlotSpan;

  bool locate(double handle, uint32_t& slot) const noexcept {
    if (!(handle >= kSlotSpan && handle < kEndHandle) || std::trunc(handle) != handle) {
      return false;
    }
    auto h = static_cast<uint64_t>(handle);
    slot = static_cast<uint32_t>(h % kMaxSlots);
    return slot < slots_.size() && slots_[slot] != nullptr &&
           generation_[slot] == static_cast<uint32_t>(h / kMaxSlots);
  }

  std::vector<T*> slots_;             // nullptr: free
  std::vector<uint32_t> generation_;  // of each slot, from 1
  std::vector<uint32_t> free_;
};

// The open semaphores: shared by the instance and each Semaphore object,
// so that whichever the environment's teardown ends last frees it.
using semaphore_table = std::shared_ptr<handle_table<shmsem_sem>>;

struct addon_data {
  addon_data() = default;
  addon_data(const addon_data&) = delete;
  addon_data& operator=(const addon_data&) = delete;

  // The instance ends (a worker thread exits, or the environment is torn
  // down) with permits still held: their seats go back, as they would
  // from a collected permit.
  ~addon_data() {
    for (shmsem_permit* p : permits.slots()) {
      if (p != nullptr) {
        shmsem_release(p);
      }
    }
  }

  Napi::FunctionReference token_ctor;
  handle_table<shmsem_permit> permits;
  semaphore_table semaphores = std::make_shared<handle_table<shmsem_sem>>();
  // Who the last grant handed over is, and when, written by each call that
  // returns a permit's handle. JavaScript reads it (exports.grant, a
  // Uint32Array of the first four fields, and exports.grantTime, a
  // Float64Array of the last) at once, before any other call into the
  // addon: numbers cost less than the string and the BigInt that every
  // grant would otherwise make.
  struct grant_record {
    uint32_t id_low, id_high, token_low, token_high;
    // The wall clock in Date.now() milliseconds, to the kernel's tick
    // (CLOCK_REALTIME_COARSE, a few ns in the vDSO; Date.now() costs ~40):
    // the library keeps a lease's times to the tick as well.
    double wall_ms;
  };
  Napi::Reference<Napi::ArrayBuffer> grant_buffer;
  grant_record* grant = nullptr;

  void describe(const shmsem_permit* p) {
    uint64_t id = shmsem_permit_id(p);
    uint64_t token = shmsem_permit_fencing_token(p);
    timespec now{};
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    *grant = {static_cast<uint32_t>(id), static_cast<uint32_t>(id >> 32),
              static_cast<uint32_t>(token), static_cast<uint32_t>(token >> 32),
              static_cast<double>(now.tv_sec) * 1000 + static_cast<double>(now.tv_nsec / 1000000)};
  }

  // The table takes p; returns its handle, with `grant` describing it. If
  // there is no room, p's seats go back before the error is thrown.
  Napi::Value hand_over(Napi::Env env, shmsem_permit* p) {
    describe(p);
    try {
      return Napi::Number::New(env, permits.add(env, p));
    } catch (...) {
      shmsem_release(p);
      throw;
    }
  }
};

addon_data& data_of(Napi::Env env) {
  return *env.GetInstanceData<addon_data>();
}

// A handle argument: a number, else a TypeError. Whether it names a permit
// is the table's question.
double handle_arg(const Napi::CallbackInfo& info) {
  return number_arg(info, 0, "permit (a permit's handle)");
}

[[noreturn]] void throw_not_held(Napi::Env env) {
  throw shmsem_error(env, SHMSEM_ENOTHELD, "the permit was released already");
}

// release(handle): frees the handle whatever the outcome, as shmsem_release
// does; throws (shmsemCode SHMSEM_ENOTHELD) when the seats were lost first,
// and for a handle that names no permit (released already).
Napi::Value release_permit(const Napi::CallbackInfo& info) {
  shmsem_permit* p = data_of(info.Env()).permits.take(handle_arg(info));
  if (p == nullptr) {
    throw_not_held(info.Env());
  }
  if (int rc = shmsem_release(p); rc != SHMSEM_OK) {
    throw_last(info.Env(), rc);
  }
  return info.Env().Undefined();
}

// dropped(handle): the seats of a permit that JavaScript collected
// unreleased go back; nothing if it was released. Never throws: it runs
// from a FinalizationRegistry callback.
Napi::Value drop_permit(const Napi::CallbackInfo& info) {
  if (info.Length() >= 1 && info[0].IsNumber()) {
    shmsem_permit* p = data_of(info.Env()).permits.take(info[0].As<Napi::Number>().DoubleValue());
    if (p != nullptr) {
      shmsem_release(p);
    }
  }
  return info.Env().Undefined();
}

// extend(handle, ttlMs)
Napi::Value extend_permit(const Napi::CallbackInfo& info) {
  shmsem_permit* p = data_of(info.Env()).permits.find(handle_arg(info));
  if (p == nullptr) {
    throw_not_held(info.Env());
  }
  int64_t ttl = integer_arg(info, 1, "ttl", 1, 1000000000);
  if (int rc = shmsem_extend(p, ttl); rc != SHMSEM_OK) {
    throw_last(info.Env(), rc);
  }
  return info.Env().Undefined();
}

// isHeld(handle): false for a handle that names no permit.
Napi::Value permit_is_held(const Napi::CallbackInfo& info) {
  shmsem_permit* p = data_of(info.Env()).permits.find(handle_arg(info));
  if (p == nullptr) {
    return Napi::Boolean::New(info.Env(), false);
  }
  int rc = shmsem_is_held(p);
  if (rc < 0) {
    throw_last(info.Env(), rc);
  }
  return Napi::Boolean::New(info.Env(), rc == 1);
}

// describe(handle): fills `grant` for the permit, as a grant does.
Napi::Value describe_permit(const Napi::CallbackInfo& info) {
  addon_data& data = data_of(info.Env());
  shmsem_permit* p = data.permits.find(handle_arg(info));
  if (p == nullptr) {
    throw_not_held(info.Env());
  }
  data.describe(p);
  return info.Env().Undefined();
}

class CancelToken : public Napi::ObjectWrap<CancelToken> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "CancelToken", {InstanceMethod<&CancelToken::cancel>("cancel")});
  }

  explicit CancelToken(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CancelToken>(info) {
    if (int rc = shmsem_cancel_token_new(&token_); rc != SHMSEM_OK) {
      throw_last(info.Env(), rc);
    }
  }

  // Not while an acquire uses it: a waiting request holds a reference to
  // this object until its callback has run on the loop.
  ~CancelToken() override { shmsem_cancel_token_free(token_); }

  shmsem_cancel_token* token() const { return token_; }

 private:
  Napi::Value cancel(const Napi::CallbackInfo& info) {
    if (int rc = shmsem_cancel(token_); rc != SHMSEM_OK) {
      throw_last(info.Env(), rc);
    }
    return info.Env().Undefined();
  }

  shmsem_cancel_token* token_ = nullptr;
};

// Seats that no JS object will own go back at once.
void give_back(shmsem_permit* p) {
  if (p != nullptr) {
    shmsem_release(p);
  }
}

// Whether a request's threadsafe function may still be called. Node frees
// a threadsafe function when its environment is torn down (a worker thread
// ends) even if another thread has not released it, so the library's thread
// checks this, under its mutex, before each call; the function's finalizer
// closes it.
struct request_gate {
  std::mutex m;
  bool open = true;
};
using gate_ref = std::shared_ptr<request_gate>;

struct acquire_request;
void settle_on_loop(Napi::Env env, Napi::Function, gate_ref*, acquire_request* r);
using acquire_tsfn = Napi::TypedThreadSafeFunction<gate_ref, acquire_request, settle_on_loop>;

// One waiting acquire: created on the loop, handed to the library's thread
// by shmsem_acquire_async, back on the loop through its threadsafe function.
struct acquire_request {
  explicit acquire_request(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}

  Napi::Promise::Deferred deferred;
  Napi::ObjectReference semaphore;  // kept alive while the request waits
  Napi::ObjectReference token;      // likewise: the C ABI needs it until the callback
  acquire_tsfn tsfn;
  gate_ref gate = std::make_shared<request_gate>();
  int status = SHMSEM_OK;
  shmsem_permit* permit = nullptr;
  std::string message;
};

void settle_on_loop(Napi::Env env, Napi::Function, gate_ref*, acquire_request* r) {
  std::unique_ptr<acquire_request> owned(r);
  if (env == nullptr) {
    // The environment is going away (worker exit): give the seats back, and
    // leave its references alone.
    give_back(r->permit);
    r->semaphore.SuppressDestruct();
    r->token.SuppressDestruct();
    return;
  }
  // An exception must not leave a callback of the loop: it would end the
  // process. If the promise cannot be settled the seats go back.
  try {
    Napi::HandleScope scope(env);
    if (r->status == SHMSEM_OK) {
      // The table owns the seats from here, even if it throws.
      shmsem_permit* p = r->permit;
      r->permit = nullptr;
      r->deferred.Resolve(data_of(env).hand_over(env, p));
    } else {
      r->deferred.Reject(shmsem_error(env, r->status, r->message).Value());
    }
  } catch (...) {
    give_back(r->permit);
  }
}

// Runs on the library's thread, through a C callback that no exception may
// cross: capture the outcome, queue it for the loop.
void acquire_done(int status, shmsem_permit* permit, void* ctx) noexcept {
  auto* r = static_cast<acquire_request*>(ctx);
  r->status = status;
  r->permit = permit;
  if (status != SHMSEM_OK) {
    try {
      r->message = shmsem_last_error();
    } catch (...) {
      // out of memory: the code alone names the failure
    }
  }
  gate_ref gate = r->gate;
  acquire_tsfn tsfn = r->tsfn;
  std::lock_guard<std::mutex> lock(gate->m);
  if (!gate->open) {
    // The environment is gone, with the promise: the seats go back here,
    // and the request's memory is left to the process.
    give_back(permit);
    return;
  }
  // The queue is unbounded, so this never blocks.
  if (tsfn.NonBlockingCall(r) != napi_ok) {
    give_back(permit);
  }
  tsfn.Release();
}

// One attempt, never waits: the handle of a new permit, or null when the
// seats are not free now or n exceeds the capacity. Arguments from `first`:
// n, ttlMs.
Napi::Value try_grant(const Napi::CallbackInfo& info, size_t first, shmsem_sem* s) {
  Napi::Env env = info.Env();
  shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
  o.n = static_cast<uint32_t>(integer_arg(info, first, "weight", 1, 1000000));
  o.ttl_ms = integer_arg(info, first + 1, "ttl", 0, 1000000000);
  o.wait_timeout_ms = 0;
  o.auto_renew = 0;
  shmsem_permit* permit = nullptr;
  int rc = shmsem_acquire(s, &o, &permit);
  if (rc == SHMSEM_OK) {
    return data_of(env).hand_over(env, permit);
  }
  if (rc == SHMSEM_ETIMEDOUT || rc == SHMSEM_EUNAVAILABLE || rc == SHMSEM_EEXCEEDS) {
    return env.Null();
  }
  throw_last(env, rc);
}

class Semaphore : public Napi::ObjectWrap<Semaphore> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "Semaphore",
                       {
                           InstanceMethod<&Semaphore::close>("close"),
                           InstanceMethod<&Semaphore::acquire>("acquire"),
                           InstanceMethod<&Semaphore::try_acquire>("tryAcquire"),
                           InstanceMethod<&Semaphore::handle>("handle"),
                           InstanceMethod<&Semaphore::capacity>("capacity"),
                           InstanceMethod<&Semaphore::used>("used"),
                           InstanceMethod<&Semaphore::available>("available"),
                           InstanceMethod<&Semaphore::waiters>("waiters"),
                           InstanceMethod<&Semaphore::is_barging>("isBarging"),
                           InstanceMethod<&Semaphore::reads_without_io>("readsWithoutIo"),
                           InstanceMethod<&Semaphore::force_release_all>("forceReleaseAll"),
                           InstanceMethod<&Semaphore::shutdown>("shutdown"),
                       });
  }

  // new Semaphore(key, permits, flags)
  explicit Semaphore(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Semaphore>(info) {
    Napi::Env env = info.Env();
    std::string key = string_arg(info, 0, "key");
    auto permits = static_cast<uint32_t>(integer_arg(info, 1, "permits", 1, 1000000));
    auto flags = static_cast<uint32_t>(integer_arg(info, 2, "flags", 0, 0xffff));
    shmsem_open_options o = SHMSEM_OPEN_OPTIONS_INIT;
    o.flags = flags;
    if (int rc = shmsem_open_ex(key.c_str(), permits, &o, &sem_); rc != SHMSEM_OK) {
      throw_last(env, rc);
    }
    try {
      table_ = data_of(env).semaphores;
      handle_ = table_->add(env, sem_);
    } catch (...) {
      shmsem_close(sem_);
      sem_ = nullptr;
      throw;
    }
  }

  ~Semaphore() override {
    forget();
    shmsem_close(sem_);
  }

 private:
  shmsem_sem* live(Napi::Env env) {
    if (sem_ == nullptr) {
      throw shmsem_error(env, SHMSEM_EINVAL, "the semaphore was closed");
    }
    return sem_;
  }

  // Its handle names nothing from here on.
  void forget() noexcept {
    if (sem_ != nullptr && table_) {
      table_->take(handle_);
    }
  }

  // The semaphore's handle, for the plain functions (tryAcquire).
  Napi::Value handle(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), handle_);
  }

  // Cancels the handle's waiting acquires (their promises reject once the
  // loop runs their callbacks) and frees it. Idempotent.
  Napi::Value close(const Napi::CallbackInfo& info) {
    forget();
    shmsem_sem* s = sem_;
    sem_ = nullptr;
    shmsem_close(s);
    return info.Env().Undefined();
  }

  // acquire(n, waitTimeoutMs, ttlMs, token) -> Promise<handle>. waitTimeoutMs
  // < 0 waits for ever; token is a CancelToken or null.
  Napi::Value acquire(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    shmsem_sem* s = live(env);
    shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
    o.n = static_cast<uint32_t>(integer_arg(info, 0, "weight", 1, 1000000));
    o.wait_timeout_ms =
        integer_arg(info, 1, "waitTimeout", -1, std::numeric_limits<int32_t>::max());
    o.ttl_ms = integer_arg(info, 2, "ttl", 0, 1000000000);
    o.auto_renew = 0;
    shmsem_cancel_token* token = nullptr;
    Napi::Object token_object;
    if (info.Length() > 3 && !info[3].IsNull() && !info[3].IsUndefined()) {
      if (!info[3].IsObject() || !info[3].As<Napi::Object>().InstanceOf(token_ctor(env))) {
        throw_type(env, "token must be a CancelToken");
      }
      token_object = info[3].As<Napi::Object>();
      token = CancelToken::Unwrap(token_object)->token();
    }

    auto r = std::make_unique<acquire_request>(env);
    Napi::Promise promise = r->deferred.Promise();
    r->semaphore = Napi::Persistent(Value());
    if (token != nullptr) {
      r->token = Napi::Persistent(token_object);
    }
    auto* gate = new gate_ref(r->gate);
    r->tsfn = acquire_tsfn::New(
        env, "shmsem.acquire", 0, 1, gate,
        [](Napi::Env, gate_ref* g, gate_ref*) {
          {
            std::lock_guard<std::mutex> lock((*g)->m);
            (*g)->open = false;
          }
          delete g;
        },
        gate);
    shmsem_permit* permit = nullptr;
    int rc = shmsem_acquire_async(s, &o, token, acquire_done, r.get(), &permit);
    if (rc == SHMSEM_EINPROGRESS) {
      r.release();  // the callback owns the request now
      return promise;
    }
    if (rc == SHMSEM_OK) {
      r->deferred.Resolve(data_of(env).hand_over(env, permit));
    } else {
      r->deferred.Reject(shmsem_error(env, rc, shmsem_last_error()).Value());
    }
    r->tsfn.Release();
    return promise;
  }

  // tryAcquire(n, ttlMs) -> handle | null: one attempt, never waits; null
  // when the seats are not free now or n exceeds the capacity.
  Napi::Value try_acquire(const Napi::CallbackInfo& info) {
    return try_grant(info, 0, live(info.Env()));
  }

  Napi::Value figure(const Napi::CallbackInfo& info, int64_t (*read)(const shmsem_sem*)) {
    int64_t v = read(live(info.Env()));
    if (v < 0) {
      throw_last(info.Env(), static_cast<int>(v));
    }
    return Napi::Number::New(info.Env(), static_cast<double>(v));
  }
  Napi::Value capacity(const Napi::CallbackInfo& info) { return figure(info, shmsem_capacity); }
  Napi::Value used(const Napi::CallbackInfo& info) { return figure(info, shmsem_used); }
  Napi::Value available(const Napi::CallbackInfo& info) { return figure(info, shmsem_available); }
  Napi::Value waiters(const Napi::CallbackInfo& info) { return figure(info, shmsem_waiters); }

  Napi::Value is_barging(const Napi::CallbackInfo& info) {
    int rc = shmsem_is_barging(live(info.Env()));
    if (rc < 0) {
      throw_last(info.Env(), rc);
    }
    return Napi::Boolean::New(info.Env(), rc == 1);
  }

  // Whether the figures, a try and isHeld answer from memory: the backend
  // says (shmsem_capabilities), not the key's scheme.
  Napi::Value reads_without_io(const Napi::CallbackInfo& info) {
    int rc = shmsem_capabilities(live(info.Env()));
    if (rc < 0) {
      throw_last(info.Env(), rc);
    }
    return Napi::Boolean::New(info.Env(), (rc & SHMSEM_CAP_READS_WITHOUT_IO) != 0);
  }

  Napi::Value force_release_all(const Napi::CallbackInfo& info) {
    int rc = shmsem_force_release_all(live(info.Env()));
    if (rc < 0) {
      throw_last(info.Env(), rc);
    }
    return Napi::Number::New(info.Env(), rc);
  }

  Napi::Value shutdown(const Napi::CallbackInfo& info) {
    if (int rc = shmsem_shutdown(live(info.Env())); rc != SHMSEM_OK) {
      throw_last(info.Env(), rc);
    }
    return info.Env().Undefined();
  }

  static Napi::Function token_ctor(Napi::Env env) {
    return env.GetInstanceData<addon_data>()->token_ctor.Value();
  }

  shmsem_sem* sem_ = nullptr;
  semaphore_table table_;
  double handle_ = 0;
};

// tryAcquire(semaphore, n, ttlMs): the same as the method, by the
// semaphore's handle.
Napi::Value try_acquire_by_handle(const Napi::CallbackInfo& info) {
  shmsem_sem* s = data_of(info.Env()).semaphores->find(number_arg(info, 0, "semaphore"));
  if (s == nullptr) {
    throw shmsem_error(info.Env(), SHMSEM_EINVAL, "the semaphore was closed");
  }
  return try_grant(info, 1, s);
}

Napi::Value remove_key(const Napi::CallbackInfo& info) {
  std::string key = string_arg(info, 0, "key");
  int rc = shmsem_remove(key.c_str());
  if (rc < 0) {
    throw_last(info.Env(), rc);
  }
  return Napi::Boolean::New(info.Env(), rc == 1);
}

Napi::Value version(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), shmsem_version());
}

Napi::Object init(Napi::Env env, Napi::Object exports) {
  auto* data = new addon_data;
  env.SetInstanceData(data);
  Napi::Function token = CancelToken::define(env);
  data->token_ctor = Napi::Persistent(token);
  Napi::ArrayBuffer grant = Napi::ArrayBuffer::New(env, sizeof(addon_data::grant_record));
  data->grant = static_cast<addon_data::grant_record*>(grant.Data());
  data->grant_buffer = Napi::Persistent(grant);
  exports.Set("Semaphore", Semaphore::define(env));
  exports.Set("CancelToken", token);
  exports.Set("grant", Napi::Uint32Array::New(env, 4, grant, 0));
  exports.Set("grantTime",
              Napi::Float64Array::New(env, 1, grant, offsetof(addon_data::grant_record, wall_ms)));
  exports.Set("tryAcquire", Napi::Function::New<try_acquire_by_handle>(env, "tryAcquire"));
  exports.Set("release", Napi::Function::New<release_permit>(env, "release"));
  exports.Set("dropped", Napi::Function::New<drop_permit>(env, "dropped"));
  exports.Set("extend", Napi::Function::New<extend_permit>(env, "extend"));
  exports.Set("isHeld", Napi::Function::New<permit_is_held>(env, "isHeld"));
  exports.Set("describe", Napi::Function::New<describe_permit>(env, "describe"));
  exports.Set("remove", Napi::Function::New<remove_key>(env, "remove"));
  exports.Set("version", Napi::Function::New<version>(env, "version"));
  return exports;
}

}  // namespace

NODE_API_MODULE(shmsem, init)
