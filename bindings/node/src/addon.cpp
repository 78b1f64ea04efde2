// bindings/node/src/addon.cpp: the N-API addon under the npm package
// `shmsem`, a thin adapter over the C ABI (<shmsem/shmsem.h>), so that Node
// shares the waiting, cancellation and hand-back of shmsem_acquire_async
// with every other binding.
//
// What it defines (the JS layer in lib/ is the public API):
//   open(key, permits, flags) -> Semaphore   close, acquire, tryAcquire,
//                                            figures, forceReleaseAll, shutdown
//   Permit                                   release, extend, isHeld, id, weight,
//                                            fencingToken
//   CancelToken                              cancel
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
//     clears its pointer when it frees the handle.
#include <napi.h>

#include <shmsem/shmsem.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>

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

// An integer argument in [lo, hi]: finite, whole, in range; else a typed error.
int64_t integer_arg(const Napi::CallbackInfo& info, size_t i, const char* name, int64_t lo,
                    int64_t hi) {
  Napi::Env env = info.Env();
  if (i >= info.Length() || !info[i].IsNumber()) {
    throw_type(env, std::string(name) + " must be a number");
  }
  double v = info[i].As<Napi::Number>().DoubleValue();
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

struct addon_data {
  Napi::FunctionReference permit_ctor;
  Napi::FunctionReference token_ctor;
};

class Permit : public Napi::ObjectWrap<Permit> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "Permit",
                       {
                           InstanceMethod<&Permit::release>("release"),
                           InstanceMethod<&Permit::extend>("extend"),
                           InstanceMethod<&Permit::is_held>("isHeld"),
                           InstanceMethod<&Permit::id>("id"),
                           InstanceMethod<&Permit::weight>("weight"),
                           InstanceMethod<&Permit::fencing_token>("fencingToken"),
                       });
  }

  // Wraps a permit the C ABI handed over; the new object owns it. If the
  // object cannot be made, the seats go back before the error is thrown.
  static Napi::Object wrap(Napi::Env env, shmsem_permit* p) {
    Napi::Object o;
    try {
      o = env.GetInstanceData<addon_data>()->permit_ctor.New({});
    } catch (...) {
      shmsem_release(p);
      throw;
    }
    Unwrap(o)->permit_ = p;
    return o;
  }

  explicit Permit(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Permit>(info) {}

  // A permit the program dropped without releasing gives its seats back, as
  // the C++ Permit's destructor does; the warning is the library's.
  ~Permit() override {
    if (permit_ != nullptr) {
      shmsem_release(permit_);
    }
  }

 private:
  shmsem_permit* live(Napi::Env env) {
    if (permit_ == nullptr) {
      throw shmsem_error(env, SHMSEM_ENOTHELD, "the permit was released already");
    }
    return permit_;
  }

  // Frees the handle whatever the outcome, as shmsem_release does; throws
  // (shmsemCode SHMSEM_ENOTHELD) when the seats were lost first, and on a
  // second call.
  Napi::Value release(const Napi::CallbackInfo& info) {
    shmsem_permit* p = live(info.Env());
    permit_ = nullptr;
    if (int rc = shmsem_release(p); rc != SHMSEM_OK) {
      throw_last(info.Env(), rc);
    }
    return info.Env().Undefined();
  }

  Napi::Value extend(const Napi::CallbackInfo& info) {
    shmsem_permit* p = live(info.Env());
    int64_t ttl = integer_arg(info, 0, "ttl", 1, 1000000000);
    if (int rc = shmsem_extend(p, ttl); rc != SHMSEM_OK) {
      throw_last(info.Env(), rc);
    }
    return info.Env().Undefined();
  }

  Napi::Value is_held(const Napi::CallbackInfo& info) {
    if (permit_ == nullptr) {
      return Napi::Boolean::New(info.Env(), false);
    }
    int rc = shmsem_is_held(permit_);
    if (rc < 0) {
      throw_last(info.Env(), rc);
    }
    return Napi::Boolean::New(info.Env(), rc == 1);
  }

  // The id as a decimal string: a 64-bit value does not fit a JS number.
  Napi::Value id(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), std::to_string(shmsem_permit_id(live(info.Env()))));
  }

  Napi::Value weight(const Napi::CallbackInfo& info) {
    int w = shmsem_permit_weight(live(info.Env()));
    if (w < 0) {
      throw_last(info.Env(), w);
    }
    return Napi::Number::New(info.Env(), w);
  }

  Napi::Value fencing_token(const Napi::CallbackInfo& info) {
    return Napi::BigInt::New(info.Env(), shmsem_permit_fencing_token(live(info.Env())));
  }

  shmsem_permit* permit_ = nullptr;
};

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
      // The Permit object owns the seats from here, even if it throws.
      shmsem_permit* p = r->permit;
      r->permit = nullptr;
      r->deferred.Resolve(Permit::wrap(env, p));
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

class Semaphore : public Napi::ObjectWrap<Semaphore> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "Semaphore",
                       {
                           InstanceMethod<&Semaphore::close>("close"),
                           InstanceMethod<&Semaphore::acquire>("acquire"),
                           InstanceMethod<&Semaphore::try_acquire>("tryAcquire"),
                           InstanceMethod<&Semaphore::capacity>("capacity"),
                           InstanceMethod<&Semaphore::used>("used"),
                           InstanceMethod<&Semaphore::available>("available"),
                           InstanceMethod<&Semaphore::waiters>("waiters"),
                           InstanceMethod<&Semaphore::is_barging>("isBarging"),
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
  }

  ~Semaphore() override { shmsem_close(sem_); }

 private:
  shmsem_sem* live(Napi::Env env) {
    if (sem_ == nullptr) {
      throw shmsem_error(env, SHMSEM_EINVAL, "the semaphore was closed");
    }
    return sem_;
  }

  // Cancels the handle's waiting acquires (their promises reject once the
  // loop runs their callbacks) and frees it. Idempotent.
  Napi::Value close(const Napi::CallbackInfo& info) {
    shmsem_sem* s = sem_;
    sem_ = nullptr;
    shmsem_close(s);
    return info.Env().Undefined();
  }

  // acquire(n, waitTimeoutMs, ttlMs, token) -> Promise<Permit>. waitTimeoutMs
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
      r->deferred.Resolve(Permit::wrap(env, permit));
    } else {
      r->deferred.Reject(shmsem_error(env, rc, shmsem_last_error()).Value());
    }
    r->tsfn.Release();
    return promise;
  }

  // tryAcquire(n, ttlMs) -> Permit | null: one attempt, never waits; null
  // when the seats are not free now or n exceeds the capacity.
  Napi::Value try_acquire(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    shmsem_sem* s = live(env);
    shmsem_acquire_options o = SHMSEM_ACQUIRE_OPTIONS_INIT;
    o.n = static_cast<uint32_t>(integer_arg(info, 0, "weight", 1, 1000000));
    o.ttl_ms = integer_arg(info, 1, "ttl", 0, 1000000000);
    o.wait_timeout_ms = 0;
    o.auto_renew = 0;
    shmsem_permit* permit = nullptr;
    int rc = shmsem_acquire(s, &o, &permit);
    if (rc == SHMSEM_OK) {
      return Permit::wrap(env, permit);
    }
    if (rc == SHMSEM_ETIMEDOUT || rc == SHMSEM_EUNAVAILABLE || rc == SHMSEM_EEXCEEDS) {
      return env.Null();
    }
    throw_last(env, rc);
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
};

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
  Napi::Function permit = Permit::define(env);
  Napi::Function token = CancelToken::define(env);
  data->permit_ctor = Napi::Persistent(permit);
  data->token_ctor = Napi::Persistent(token);
  env.SetInstanceData(data);
  exports.Set("Semaphore", Semaphore::define(env));
  exports.Set("Permit", permit);
  exports.Set("CancelToken", token);
  exports.Set("remove", Napi::Function::New<remove_key>(env, "remove"));
  exports.Set("version", Napi::Function::New<version>(env, "version"));
  return exports;
}

}  // namespace

NODE_API_MODULE(shmsem, init)
