// module.cpp: shmsem._shmsem, the extension module under the Python package
// `shmsem`. It wraps the C++ API (linked as libshmsem.so, never a second
// copy) and adds what Python programs expect of a blocking call:
//   - the GIL is released around every call that can block or take the
//     segment lock, so other threads run;
//   - a blocking acquire in the main thread waits in a waiter thread while
//     the main thread runs the signal handlers every kSignalTick, so Ctrl-C
//     raises KeyboardInterrupt and withdraws the request;
//   - the library's log lines go to logging.getLogger("shmsem").
// The pure-Python parts (exceptions, bounded, acquire_async) are in
// shmsem/*.py.
#include <Python.h>
#include <pthread.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <shmsem/logging.hpp>
#include <shmsem/shmsem.hpp>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace py = pybind11;
using namespace std::chrono_literals;

namespace {

// How often a main thread blocked in acquire() runs Python's signal
// handlers: Ctrl-C takes effect within this (plus a few ms to withdraw).
constexpr auto kSignalTick = 40ms;

// ---------------------------------------------------------------------------
// Logging: library lines to logging.getLogger("shmsem").
//
// A line logged by a thread that holds the GIL goes to Python at once.
// Others (a call that released the GIL, the library's renewal thread) are
// queued and delivered by the next thread that returns from a shmsem call,
// or by the main thread (Py_AddPendingCall) if none comes soon. No library
// thread ever waits for the GIL, so logging cannot deadlock against a
// Python thread that waits for the segment lock.

struct log_line {
  int level;  // Python's logging level
  std::string text;
};

struct log_queue {
  std::mutex mu;
  std::deque<log_line> lines;
  bool scheduled = false;  // a pending call is on its way
};

// Leaked: library threads may log while the interpreter exits.
log_queue* queue = new log_queue;
std::atomic<bool> python_alive{true};

int python_level(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return 10;
    case spdlog::level::info:
      return 20;
    case spdlog::level::warn:
      return 30;
    case spdlog::level::err:
      return 40;
    default:
      return 50;
  }
}

// [GIL] Hands one line to Python's logging; never raises.
void emit(const log_line& line) {
  py::error_scope keep;  // a pending exception (a dealloc) stays as it was
  try {
    py::module_::import("logging").attr("getLogger")("shmsem").attr("log")(line.level, line.text);
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("shmsem log line");
  }
}

// [GIL] Delivers the queued lines, in order.
void drain_logs() noexcept {
  std::deque<log_line> lines;
  {
    std::lock_guard g(queue->mu);
    if (queue->lines.empty()) return;
    lines.swap(queue->lines);
  }
  for (const log_line& l : lines) emit(l);
}

int drain_pending(void*) {
  {
    std::lock_guard g(queue->mu);
    queue->scheduled = false;
  }
  drain_logs();
  return 0;
}

class python_sink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    log_line line{python_level(msg.level), std::string(msg.payload.data(), msg.payload.size())};
    if (python_alive.load() && PyGILState_Check()) {
      drain_logs();
      emit(line);
      return;
    }
    bool schedule = false;
    {
      std::lock_guard g(queue->mu);
      queue->lines.push_back(std::move(line));
      schedule = !queue->scheduled;
      queue->scheduled = true;
    }
    if (schedule && python_alive.load() && Py_AddPendingCall(drain_pending, nullptr) != 0) {
      std::lock_guard g(queue->mu);
      queue->scheduled = false;  // delivered by the next shmsem call instead
    }
  }
  void flush_() override {}
};

void install_logger() {
  auto logger = std::make_shared<spdlog::logger>("shmsem", std::make_shared<python_sink>());
  // Every line goes to Python; its logging configuration decides what shows.
  logger->set_level(spdlog::level::debug);
  shmsem::set_logger(std::move(logger));
}

// Python's atexit: from here on the library logs to stderr again.
void python_exiting() {
  drain_logs();
  python_alive.store(false);
  shmsem::set_logger(nullptr);
}

// ---------------------------------------------------------------------------
// Errors: the C++ exceptions become the classes of shmsem/_types.py.

struct error_classes {
  py::object acquisition, timeout, not_held, extension, segment, untrusted_owner;
};
error_classes* errors = nullptr;  // leaked, like the module

void raise_as(const py::object& cls, py::args args) {
  py::object e = cls(*args);
  PyErr_SetObject(cls.ptr(), e.ptr());
}

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const shmsem::AcquisitionError& e) {
    const char* reason = shmsem::to_string(e.reason());
    raise_as(e.reason() == shmsem::Reason::timeout ? errors->timeout : errors->acquisition,
             py::make_tuple(e.what(), reason));
  } catch (const shmsem::PermitNotHeldError& e) {
    raise_as(errors->not_held, py::make_tuple(e.what()));
  } catch (const shmsem::ExtensionError& e) {
    raise_as(errors->extension, py::make_tuple(e.what()));
  } catch (const shmsem::SegmentError& e) {
    raise_as(e.code() == shmsem::errc::untrusted_owner ? errors->untrusted_owner : errors->segment,
             py::make_tuple(e.what(), e.code().value(), std::string(e.code().category().name())));
  }
}

// ---------------------------------------------------------------------------
// Calls into the library.

// Runs f without the GIL; then, with the GIL back, delivers the log lines
// the call produced (also when f throws).
template <class F>
decltype(auto) without_gil(F&& f) {
  struct deliver_logs {
    ~deliver_logs() { drain_logs(); }
  } deliver;  // destroyed after `released`, so with the GIL held
  py::gil_scoped_release released;
  return f();
}

// Options::trusted_owners from an iterable of user names and uids (None:
// none). A bare str is refused: iterating it would trust its letters.
std::vector<std::string> owner_list(const py::object& owners) {
  if (owners.is_none()) return {};
  if (py::isinstance<py::str>(owners) || py::isinstance<py::bytes>(owners))
    throw py::type_error("shmsem: trusted_owners must be a list of user names or uids, not one " +
                         std::string(py::str(owners.get_type().attr("__name__"))));
  std::vector<std::string> out;
  for (const py::handle o : owners) {
    if (py::isinstance<py::bool_>(o) ||
        !(py::isinstance<py::str>(o) || py::isinstance<py::int_>(o)))
      throw py::type_error("shmsem: trusted_owners holds " + std::string(py::repr(o)) +
                           "; it takes user names (str) and uids (int)");
    if (py::isinstance<py::int_>(o) && PyObject_RichCompareBool(o.ptr(), py::int_(0).ptr(), Py_LT))
      throw py::value_error("shmsem: trusted_owners holds a negative uid " +
                            std::string(py::repr(o)));
    out.push_back(py::str(o));
  }
  return out;
}

std::optional<std::chrono::milliseconds> duration_ms(const py::object& seconds, const char* what,
                                                     bool allow_zero) {
  if (seconds.is_none()) return std::nullopt;
  const double s = seconds.cast<double>();
  if (!std::isfinite(s) || s < 0 || (!allow_zero && s == 0))
    throw py::value_error(std::string("shmsem: ") + what + " must be " +
                          (allow_zero ? ">= 0" : "> 0") + " seconds or None, got " +
                          py::repr(seconds).cast<std::string>());
  const double ms = std::ceil(s * 1000.0);  // never shorter than asked
  if (ms > static_cast<double>(shmsem::kMaxDuration.count()))
    throw py::value_error(std::string("shmsem: ") + what + " of " +
                          py::repr(seconds).cast<std::string>() + " s is longer than " +
                          std::to_string(shmsem::kMaxDuration.count() / 1000) + " s");
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms));
}

double seconds_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

shmsem::AcquireOptions acquire_options(const py::object& timeout, const py::object& ttl,
                                       bool auto_renew) {
  shmsem::AcquireOptions o;
  o.wait_timeout = duration_ms(timeout, "timeout", true);
  o.ttl = duration_ms(ttl, "ttl", true);
  o.auto_renew = auto_renew;
  return o;
}

void check_n(int n) {
  if (n < 1) throw py::value_error("shmsem: n must be >= 1, got " + std::to_string(n));
}

unsigned long main_thread_id = 0;

bool in_main_thread() {
  return PyThread_get_thread_ident() == main_thread_id;
}

// ---------------------------------------------------------------------------
// The Python classes.

// A key whose backend does I/O (a server): its figures and is_held() are
// round trips, made without the GIL.
bool does_io(std::string_view key) {
  return !shmsem::Semaphore::capabilities_of(key).reads_without_io;
}

// A grant made through a Semaphore object. The object keeps it until it is
// released, through its Permit or through Semaphore.release(): a Permit the
// caller drops does not give the seats back, so `if sem.acquire(timeout=5):`
// and a bare `sem.acquire()` hold them, as threading.Semaphore does. Once no
// Semaphore object and no Permit refers to it, nothing can release it any
// more: like an unclosed file, it is released with a ResourceWarning.
struct lease {
  shmsem::Permit permit;
  pid_t pid = ::getpid();  // after fork() the parent's leases stay the parent's
  unsigned long thread = PyThread_get_thread_ident();  // release() prefers its own thread's

  explicit lease(shmsem::Permit p) : permit(std::move(p)) {}
  lease(const lease&) = delete;
  lease& operator=(const lease&) = delete;
  ~lease() {
    if (!permit) return;
    if (!python_alive.load() || !PyGILState_Check()) {
      shmsem::Permit dying(std::move(permit));
      return;
    }
    if (pid == ::getpid()) {
      py::error_scope keep;  // a pending exception (a dealloc) stays as it was
      const std::string key(permit.key());
      if (PyErr_WarnFormat(PyExc_ResourceWarning, 1,
                           "shmsem: %d seat(s) of '%s' (permit %llu) were never released, and "
                           "neither their Permit nor their Semaphore remains; releasing them",
                           permit.weight(), key.c_str(),
                           static_cast<unsigned long long>(permit.id())) < 0)
        PyErr_WriteUnraisable(nullptr);  // -W error::ResourceWarning, as for a file
    }
    // A seat lost meanwhile is logged by the library (delivered to logging).
    without_gil([&] { shmsem::Permit dying(std::move(permit)); });
  }
};

// The leases a Semaphore object keeps (guarded by the GIL). Shared with its
// permits, so that a Permit's release() can take its lease out of it.
struct kept_leases {
  std::vector<std::shared_ptr<lease>> leases;

  void forget(const lease* l) {
    std::erase_if(leases, [&](const std::shared_ptr<lease>& x) { return x.get() == l; });
  }
};

struct permit_object {
  std::shared_ptr<lease> held;
  std::weak_ptr<kept_leases> keeper;
  shmsem::Permit& permit;    // held->permit
  bool asks_server = false;  // its calls are round trips (not reads_without_io)

  permit_object(std::shared_ptr<lease> l, std::weak_ptr<kept_leases> k)
      : held(std::move(l)),
        keeper(std::move(k)),
        permit(held->permit),
        asks_server(does_io(permit.key())) {}
  permit_object(const permit_object&) = delete;
  permit_object& operator=(const permit_object&) = delete;

  // [GIL] The seats, taken out of this permit and out of its Semaphore
  // object's keeping, to be released by the caller (without the GIL).
  shmsem::Permit take() {
    if (auto k = keeper.lock()) k->forget(held.get());
    return std::move(permit);
  }
};

struct cancel_token {
  std::stop_source source;
};

// One blocking acquire that the main thread hands to the waiter thread.
struct wait_job {
  shmsem::Semaphore* sem = nullptr;
  int n = 1;
  shmsem::AcquireOptions options;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<shmsem::Permit> permit;
  std::exception_ptr error;
};

// The thread in which the main thread's contended acquires wait, one at a
// time (only the main thread uses it). It lives as long as the process: a
// thread per acquire would cost a thread start and, in the library, a
// thread record and a reserve of lease slots taken and given back each
// time. Created at the first contended acquire of each process: a child
// of fork() has none of its parent's threads and makes its own.
class waiter_thread {
 public:
  static waiter_thread& of_this_process() {
    static waiter_thread* current = nullptr;
    static pid_t owner = 0;
    if (!current || owner != ::getpid()) {
      // The parent's object may be locked by a thread the child does not
      // have: it is left alone (leaked), as everything else here is.
      current = new waiter_thread;
      owner = ::getpid();
    }
    return *current;
  }

  // Hands over `job`; its cv is signalled when it is done.
  void submit(const std::shared_ptr<wait_job>& job) {
    std::lock_guard g(mu_);
    if (!started_) {
      std::thread(&waiter_thread::run, this).detach();
      started_ = true;
    }
    next_ = job;
    cv_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      std::shared_ptr<wait_job> job;
      {
        std::unique_lock l(mu_);
        cv_.wait(l, [&] { return next_ != nullptr; });
        job = std::move(next_);
      }
      std::optional<shmsem::Permit> p;
      std::exception_ptr error;
      try {
        p.emplace(job->sem->acquire(job->n, job->options));
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard g(job->mu);
      job->permit = std::move(p);
      job->error = error;
      job->done = true;
      job->cv.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<wait_job> next_;
  bool started_ = false;
};

struct semaphore_object {
  shmsem::Semaphore sem;
  bool asks_server = false;  // its calls are round trips (not reads_without_io)
  // What pickling passes to the other process: (key, permits, options) for
  // shmsem._reopen; permits is None for a handle from attach().
  py::object reopen_args;
  std::shared_ptr<kept_leases> kept = std::make_shared<kept_leases>();

  semaphore_object(shmsem::Semaphore s, py::object args)
      : sem(std::move(s)),
        asks_server(!sem.capabilities().reads_without_io),
        reopen_args(std::move(args)) {}

  // [GIL] A Permit for `p`, whose seats this object keeps until released.
  permit_object* keep(shmsem::Permit p) {
    auto l = std::make_shared<lease>(std::move(p));
    kept->leases.push_back(l);
    return new permit_object(std::move(l), kept);
  }

  // [GIL] Semaphore.release(): gives back the most recent lease that this
  // process took through this object, the calling thread's first.
  void release_one() {
    const pid_t me = ::getpid();
    const unsigned long thread = PyThread_get_thread_ident();
    auto& all = kept->leases;
    auto pick = all.rend();
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if ((*it)->pid != me) continue;
      if ((*it)->thread == thread) {
        pick = it;
        break;
      }
      if (pick == all.rend()) pick = it;
    }
    if (pick == all.rend())
      throw py::value_error("shmsem: release() on '" + std::string(sem.key()) +
                            "': this Semaphore object holds no seat taken by this process");
    std::shared_ptr<lease> l = *pick;
    all.erase(std::next(pick).base());
    shmsem::Permit taken = std::move(l->permit);
    without_gil([&] { taken.release(); });
  }

  template <class F>
  auto figure(F&& f) const {
    if (asks_server) return without_gil(std::forward<F>(f));
    return f();
  }

  // One attempt without queueing, when the seats look free (a lock-free
  // read); nullopt when they do not or were taken meanwhile. Never blocks:
  // a zero wait budget does not wait for the segment lock either.
  std::optional<shmsem::Permit> acquire_now(int n, shmsem::AcquireOptions o) {
    // On Redis the two reads would cost two round trips; the try is one.
    if (asks_server) return without_gil([&] { return sem.try_acquire(n, o); });
    if (sem.available() < n || sem.waiters() > 0) return std::nullopt;
    o.wait_timeout = 0ms;
    try {
      return without_gil([&] { return std::optional<shmsem::Permit>(sem.acquire(n, o)); });
    } catch (const shmsem::AcquisitionError& e) {
      if (e.reason() == shmsem::Reason::timeout) return std::nullopt;
      throw;
    }
  }

  // The main thread's blocking acquire: the waiter thread waits in the
  // queue, this thread runs the signal handlers meanwhile. An exception
  // from a handler (KeyboardInterrupt) cancels the request; a seat granted
  // as the cancel lands goes back.
  shmsem::Permit acquire_interruptibly(int n, shmsem::AcquireOptions o, cancel_token* cancel) {
    auto job = std::make_shared<wait_job>();
    std::stop_source stop;
    o.stop = stop.get_token();
    // The caller's token withdraws the request as Ctrl-C does, from any thread.
    std::optional<std::stop_callback<std::function<void()>>> forward;
    if (cancel) forward.emplace(cancel->source.get_token(), [&stop] { stop.request_stop(); });
    job->sem = &sem;
    job->n = n;
    job->options = std::move(o);
    waiter_thread::of_this_process().submit(job);
    auto wait = [&](std::chrono::milliseconds tick) {
      py::gil_scoped_release released;
      std::unique_lock l(job->mu);
      return job->cv.wait_for(l, tick, [&] { return job->done; });
    };
    for (;;) {
      const bool done = wait(kSignalTick);
      drain_logs();
      if (done) break;
      if (PyErr_CheckSignals() != 0) {
        stop.request_stop();
        while (!wait(std::chrono::hours(1))) {
        }
        without_gil([&] { job->permit.reset(); });  // granted as the cancel landed
        throw py::error_already_set();
      }
    }
    if (job->error) std::rethrow_exception(job->error);
    return std::move(*job->permit);
  }

  [[noreturn]] void throw_cancelled(int n) const {
    throw shmsem::AcquisitionError(shmsem::Reason::cancelled,
                                   "shmsem: cannot acquire " + std::to_string(n) + " seat(s) of '" +
                                       std::string(sem.key()) + "': cancelled");
  }

  permit_object* acquire(int n, const py::object& timeout, const py::object& ttl, bool auto_renew,
                         cancel_token* cancel) {
    check_n(n);
    shmsem::AcquireOptions o = acquire_options(timeout, ttl, auto_renew);
    if (cancel && cancel->source.stop_requested()) throw_cancelled(n);
    if (in_main_thread()) {
      if (auto p = acquire_now(n, o)) return keep(std::move(*p));
      if (o.wait_timeout && o.wait_timeout->count() == 0)
        return keep(without_gil([&] { return sem.acquire(n, o); }));
      return keep(acquire_interruptibly(n, std::move(o), cancel));
    }
    // Python runs signal handlers in the main thread only: another thread
    // simply blocks (without the GIL), as threading.Lock.acquire() does.
    if (cancel) o.stop = cancel->source.get_token();
    return keep(without_gil([&] { return sem.acquire(n, o); }));
  }

  py::object try_now(int n, const py::object& ttl, bool auto_renew) {
    check_n(n);
    auto p = acquire_now(n, acquire_options(py::none(), ttl, auto_renew));
    if (!p) return py::none();
    return py::cast(keep(std::move(*p)), py::return_value_policy::take_ownership);
  }

  py::object try_acquire(int n, const py::object& ttl, bool auto_renew) {
    check_n(n);
    shmsem::AcquireOptions o = acquire_options(py::none(), ttl, auto_renew);
    auto p = without_gil([&] { return sem.try_acquire(n, o); });
    if (!p) return py::none();
    return py::cast(keep(std::move(*p)), py::return_value_policy::take_ownership);
  }
};

py::object holder_to_python(const shmsem::Holder& h, const py::object& holder_class) {
  py::object expires =
      h.expires_at ? py::object(py::float_(seconds_of(*h.expires_at))) : py::none();
  return holder_class(h.pid, h.weight, h.permit_id, seconds_of(h.acquired_at), expires,
                      shmsem::to_string(h.state), h.foreign_namespace, h.host);
}

py::dict histogram_to_python(const shmsem::Histogram& h) {
  py::dict d;
  py::list bounds, counts;
  for (double b : shmsem::Histogram::kBounds) bounds.append(b);
  for (auto c : h.counts) counts.append(c);
  d["bounds"] = bounds;
  d["counts"] = counts;
  d["sum"] = h.sum_seconds;
  d["count"] = h.count();
  return d;
}

std::string permit_repr(const permit_object& p) {
  if (!p.permit) return "<shmsem.Permit released>";
  return "<shmsem.Permit key='" + std::string(p.permit.key()) +
         "' id=" + std::to_string(p.permit.id()) + " weight=" + std::to_string(p.permit.weight()) +
         ">";
}

// The work already ran; raising at the end of a `with` block would also
// hide the block's own exception. The loss is logged, as C++ with_permit()
// does.
void log_lost_after_work(const shmsem::PermitNotHeldError& e) {
  emit(log_line{30, std::string(e.what()) + " (the work had already run)"});
}

void release_on_exit(permit_object& p) {
  shmsem::Permit taken = p.take();
  try {
    without_gil([&] { taken.release(); });
  } catch (const shmsem::PermitNotHeldError& e) {
    log_lost_after_work(e);
  }
}

// The constructor and attach(): how a handle comes to be.
void def_semaphore_open(py::class_<semaphore_object>& semaphore_type) {
  semaphore_type
      .def(
          py::init([](const std::string& key, int permits, int mode, const py::object& ttl,
                      bool auto_renew, double open_timeout, const py::object& trusted_owners,
                      const py::object& session_timeout, const py::object& connect_timeout,
                      bool fencing, const py::object& fairness) {
            shmsem::Options o;
            o.trusted_owners = owner_list(trusted_owners);
            o.mode = static_cast<mode_t>(mode);
            o.ttl = duration_ms(ttl, "ttl", false);
            o.auto_renew = auto_renew;
            if (!std::isfinite(open_timeout) || open_timeout < 0)
              throw py::value_error("shmsem: open_timeout must be >= 0 seconds");
            o.open_timeout = std::chrono::milliseconds(
                static_cast<std::int64_t>(std::ceil(open_timeout * 1000.0)));
            if (auto d = duration_ms(session_timeout, "session_timeout", false))
              o.session_timeout = *d;
            if (auto d = duration_ms(connect_timeout, "connect_timeout", false))
              o.connect_timeout = *d;
            o.fencing = fencing;
            if (!fairness.is_none()) {
              const auto policy = fairness.cast<std::string>();
              if (policy != "fifo" && policy != "barging")
                throw py::value_error("fairness must be 'fifo' or 'barging', not '" + policy + "'");
              o.fairness = policy == "barging" ? shmsem::Fairness::barging : shmsem::Fairness::fifo;
            }
            py::dict options(py::arg("mode") = mode, py::arg("ttl") = ttl,
                             py::arg("auto_renew") = auto_renew,
                             py::arg("open_timeout") = open_timeout,
                             py::arg("trusted_owners") = py::list(py::cast(o.trusted_owners)),
                             py::arg("session_timeout") = session_timeout,
                             py::arg("connect_timeout") = connect_timeout,
                             py::arg("fencing") = fencing, py::arg("fairness") = fairness);
            return new semaphore_object(
                without_gil([&] { return shmsem::Semaphore::open(key, permits, o); }),
                py::make_tuple(key, permits, options));
          }),
          py::arg("key"), py::arg("permits"), py::kw_only(), py::arg("mode") = 0600,
          py::arg("ttl") = py::none(), py::arg("auto_renew") = false, py::arg("open_timeout") = 5.0,
          py::arg("trusted_owners") = py::tuple(), py::arg("session_timeout") = py::none(),
          py::arg("connect_timeout") = py::none(), py::arg("fencing") = false,
          py::arg("fairness") = py::none(),
          R"doc(Opens (or creates with `permits` seats) the semaphore `key`.

mode: of a segment this call creates (0o660 shares it with the file's group).
ttl: default lease TTL in seconds of this handle's permits (None: no expiry).
auto_renew: default for permits with a TTL: renew them in the background.
open_timeout: how long to wait for another process that is creating it.
trusted_owners: users (names or uids) whose segments to accept on purpose;
without them only segments of this user or root are accepted (or, for a
non-root process, one that others cannot write).
session_timeout: Redis keys only: seconds this process's leases outlive its
last contact with Redis (None: 3).
connect_timeout: Redis keys only: the bound in seconds on connecting and on
each command (None: 1).
fencing: shared memory, at creation: grants carry fencing tokens.
fairness: shared memory, at creation: 'barging' (None: the default; a
running request may take a free seat ahead of the sleeping ones until the
first in line has been first for 1 ms) or 'fifo' (a freed seat goes to the
first in line, so every wait is bounded). An existing semaphore keeps its
own (a different one asked for is logged). Redis keys are always FIFO.
A key that is a URL, redis://host[:port]/KEY or redis+unix:///PATH?key=KEY,
names a semaphore kept in Redis and shared by every host that reaches it.
Raises ValueError for a bad key (empty, NUL, over 255 bytes, a bad URL) or
permits out of 1..1000000, UntrustedOwnerError when the segment belongs to a
user it does not trust, SegmentError when the segment cannot be used
otherwise or Redis cannot be reached.)doc")
      .def_static(
          "attach",
          [](const std::string& key, const py::object& trusted_owners) {
            shmsem::Options o;
            o.trusted_owners = owner_list(trusted_owners);
            py::dict options(py::arg("trusted_owners") = py::list(py::cast(o.trusted_owners)));
            return new semaphore_object(
                without_gil([&] { return shmsem::Semaphore::attach(key, o); }),
                py::make_tuple(key, py::none(), options));
          },
          py::arg("key"), py::kw_only(), py::arg("trusted_owners") = py::tuple(),
          "Opens an existing semaphore without creating it; SegmentError if there is none, "
          "UntrustedOwnerError if it belongs to a user it does not trust (see trusted_owners).");
}

// Taking and giving back seats, with or without waiting.
void def_semaphore_seats(py::class_<semaphore_object>& semaphore_type) {
  semaphore_type
      .def("acquire", &semaphore_object::acquire, py::arg("n") = 1, py::arg("timeout") = py::none(),
           py::arg("ttl") = py::none(), py::arg("auto_renew") = false,
           py::arg("cancel") = static_cast<cancel_token*>(nullptr),
           (R"doc(Takes `n` seats, all or nothing, waiting in FIFO order; returns a Permit.

The seats stay held until the Permit's release() or this object's release(),
even if the Permit is dropped (`if sem.acquire(timeout=5): ...` holds them).
timeout: seconds to wait (None: for ever; 0: do not wait).
ttl: lease TTL in seconds (None: the handle's default; 0: no expiry).
auto_renew: renew the lease in the background at a third of its TTL.
cancel: a CancelToken; its cancel(), from any thread, ends the wait with
AcquisitionError 'cancelled'.
Releases the GIL while it waits. In the main thread, Ctrl-C (or any signal
handler that raises) interrupts the wait within about )doc" +
            std::to_string(kSignalTick.count()) + R"doc( ms, withdraws the
request and leaves no seat taken.
Raises AcquisitionError with .reason 'timeout' (also a TimeoutError),
'cancelled', 'shutdown', 'exceeds_capacity' (n > capacity) or 'error';
ValueError for n < 1 or a negative duration.)doc")
               .c_str())
      .def(
          "release", [](semaphore_object& s) { s.release_one(); },
          R"doc(Gives back one lease that this process took through this object (its
seats; the calling thread's most recent first), as threading.Semaphore.release()
does. Its Permit, if still around, is then released too.
Raises ValueError if this object holds none, PermitNotHeldError if the seats
were lost first (the lease is given up either way).)doc")
      .def(
          "__enter__",
          [](semaphore_object& s) { return s.acquire(1, py::none(), py::none(), false, nullptr); },
          "`with sem:` takes one seat (waiting for ever) and gives it back on exit.")
      .def("__exit__",
           [](semaphore_object& s, const py::object&, const py::object&, const py::object&) {
             try {
               s.release_one();
             } catch (const shmsem::PermitNotHeldError& e) {
               log_lost_after_work(e);
             }
             return false;
           })
      .def("__reduce__",
           [](const semaphore_object& s) {
             return py::make_tuple(py::module_::import("shmsem").attr("_reopen"), s.reopen_args);
           })
      .def("try_acquire", &semaphore_object::try_acquire, py::arg("n") = 1,
           py::arg("ttl") = py::none(), py::arg("auto_renew") = false,
           R"doc(One attempt without waiting: a Permit, or None when the seats are not free
now, when others are queued (it does not jump the queue), or when n > capacity.)doc")
      .def("_acquire_now", &semaphore_object::try_now, py::arg("n"), py::arg("ttl"),
           py::arg("auto_renew"));
}

// The lock-free reads of the semaphore's state.
void def_semaphore_figures(py::class_<semaphore_object>& semaphore_type) {
  semaphore_type
      .def_property_readonly(
          "key", [](const semaphore_object& s) { return std::string(s.sem.key()); },
          "The key this handle was opened with.")
      .def_property_readonly(
          "capacity",
          [](const semaphore_object& s) { return s.figure([&] { return s.sem.capacity(); }); },
          "The fleet-wide number of seats (lock-free read).")
      .def_property_readonly(
          "used", [](const semaphore_object& s) { return s.figure([&] { return s.sem.used(); }); },
          "Seats held now, fleet-wide (lock-free read).")
      .def_property_readonly(
          "available",
          [](const semaphore_object& s) { return s.figure([&] { return s.sem.available(); }); },
          "capacity - used, never below 0.")
      .def_property_readonly(
          "waiters",
          [](const semaphore_object& s) { return s.figure([&] { return s.sem.waiters(); }); },
          "Callers blocked in acquire, fleet-wide.")
      .def_property_readonly(
          "fairness",
          [](const semaphore_object& s) {
            return std::string(shmsem::to_string(s.figure([&] { return s.sem.fairness(); })));
          },
          "'fifo' or 'barging': how freed seats reach the waiters, chosen at creation.")
      .def_property_readonly(
          "utilization",
          [](const semaphore_object& s) { return s.figure([&] { return s.sem.utilization(); }); },
          "used / capacity (may exceed 1 after a shrink).");
}

// Operator calls: capacity, reaping, inspection, shutdown.
void def_semaphore_admin(py::class_<semaphore_object>& semaphore_type) {
  semaphore_type
      .def(
          "set_capacity",
          [](semaphore_object& s, int permits) {
            without_gil([&] { s.sem.set_capacity(permits); });
          },
          py::arg("permits"),
          R"doc(Sets the fleet-wide capacity (1..1000000). Growing wakes waiters; shrinking
takes no seat away, and waiters whose n no longer fits fail with
'exceeds_capacity'.)doc")
      .def(
          "force_release_all",
          [](semaphore_object& s) {
            return without_gil([&] { return s.sem.force_release_all(); });
          },
          R"doc(Frees every seat; returns the number of live, unexpired leases displaced
(their release() then raises PermitNotHeldError).)doc")
      .def(
          "wait_idle",
          [](semaphore_object& s, const py::object& timeout) {
            auto d = duration_ms(timeout, "timeout", true);
            return without_gil([&] { return s.sem.wait_idle(d.value_or(shmsem::kMaxDuration)); });
          },
          py::arg("timeout") = py::none(),
          R"doc(Blocks until no seat is used (True) or `timeout` seconds pass (False).
Reaps dead holders meanwhile. Does not block new acquires.)doc")
      .def(
          "reap", [](semaphore_object& s) { return without_gil([&] { return s.sem.reap(); }); },
          "Reclaims dead holders' and expired leases' seats now; returns the seats freed.")
      .def(
          "holders",
          [](const semaphore_object& s) {
            auto all = s.figure([&] { return s.sem.holders(); });
            py::object cls = py::module_::import("shmsem._types").attr("Holder");
            py::list out;
            for (const auto& h : all) out.append(holder_to_python(h, cls));
            return out;
          },
          "The current leases, as Holder objects (.pid, .host, .weight, .acquired_at, "
          ".expires_at, .state, ...), read without a lock.")
      .def(
          "stats",
          [](const semaphore_object& s) {
            const shmsem::Stats st = s.figure([&] { return s.sem.stats(); });
            py::object cls = py::module_::import("shmsem._types").attr("Stats");
            return cls(st.acquired, st.released, st.timeouts, st.cancelled, st.shutdowns,
                       st.rejected, st.try_failures, st.reaped, st.expired, st.force_released,
                       st.reclaimed_seats, st.recoveries, histogram_to_python(st.wait),
                       histogram_to_python(st.hold));
          },
          "The fleet-wide counters kept in the segment since it was created, as a Stats object.")
      .def(
          "shutdown", [](semaphore_object& s) { without_gil([&] { s.sem.shutdown(); }); },
          R"doc(Application shutdown for this handle: its blocked acquires fail with
'shutdown', later ones too, and its permits stop renewing. Held permits are
not released.)doc")
      .def("__repr__", [](const semaphore_object& s) {
        return "<shmsem.Semaphore key='" + std::string(s.sem.key()) +
               "' capacity=" + std::to_string(s.sem.capacity()) +
               " used=" + std::to_string(s.sem.used()) + ">";
      });
}

// Static calls on a key, without an open handle.
void def_semaphore_by_key(py::class_<semaphore_object>& semaphore_type) {
  semaphore_type
      .def_static(
          "remove",
          [](const std::string& key) {
            return without_gil([&] { return shmsem::Semaphore::remove(key); });
          },
          py::arg("key"),
          "Removes the semaphore's name (processes that have it open keep their copy). "
          "True if removed, False if there was none.")
      .def_static(
          "remove_if_unused",
          [](const std::string& key) {
            return without_gil([&] { return shmsem::Semaphore::remove_if_unused(key); });
          },
          py::arg("key"), "Removes it only if no live process has it open.")
      .def_static(
          "list",
          [](const py::object& server) {
            if (server.is_none()) return without_gil([] { return shmsem::Semaphore::list(); });
            const auto url = server.cast<std::string>();
            return without_gil([&] { return shmsem::Semaphore::list(url); });
          },
          py::arg("server") = py::none(),
          R"doc(The keys of the semaphores on this host, sorted; with `server`
(redis://host[:port] or redis+unix:///PATH), the URLs of that Redis server's
semaphores, which open as they are.)doc")
      .def_static("segment_path", &shmsem::Semaphore::segment_path, py::arg("key"),
                  "Where the segment of `key` lives (under /dev/shm); ValueError for a Redis "
                  "key, which has no file.");
}

// The C++ errors are raised as the classes of shmsem._types; they are looked
// up before any binding can raise one.
void register_errors() {
  py::module_ errs = py::module_::import("shmsem._types");
  errors = new error_classes{errs.attr("AcquisitionError"),   errs.attr("AcquisitionTimeoutError"),
                             errs.attr("PermitNotHeldError"), errs.attr("ExtensionError"),
                             errs.attr("SegmentError"),       errs.attr("UntrustedOwnerError")};
  py::register_exception_translator(translate);
}

// What the module needs from the process around it: fork, logging, exit.
void register_process_hooks() {
  // After fork(), the child's queue lock may be held by a thread that does
  // not exist there; and its main thread is the one that forked.
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] {
    ::pthread_atfork(nullptr, nullptr, [] {
      queue = new (std::nothrow) log_queue;  // the old one may be locked: leak it
    });
  });
  py::module_::import("os").attr("register_at_fork")(
      py::arg("after_in_child") =
          py::cpp_function([] { main_thread_id = PyThread_get_thread_ident(); }));

  install_logger();
  py::module_::import("atexit").attr("register")(py::cpp_function(python_exiting));
}

void register_cancel_token(py::module_& m) {
  py::class_<cancel_token>(
      m, "CancelToken",
      "Cancels the blocking acquire that carries it (acquire(cancel=token)), from "
      "any thread.")
      .def(py::init<>())
      .def(
          "cancel", [](cancel_token& t) { t.source.request_stop(); },
          "Ends the acquire that waits with this token (AcquisitionError, reason "
          "'cancelled').")
      .def_property_readonly("cancelled",
                             [](const cancel_token& t) { return t.source.stop_requested(); });
}

void register_permit(py::module_& m) {
  py::class_<permit_object>(m, "Permit", R"doc(
A lease on `weight` seats of one semaphore, returned by Semaphore.acquire().

It holds the seats until release() (or Semaphore.release()), or until they
are lost: the TTL ran out, the holder was judged dead, or an operator called
force_release_all(). Dropping the Permit does not release them: its Semaphore
object keeps them, as threading.Semaphore does. Only when neither remains are
they released, with a ResourceWarning, as an unclosed file is closed.
As a context manager it releases on exit; a seat lost meanwhile is logged as
a warning (the work already ran).
If the process dies, even by SIGKILL, the fleet reclaims the seats.
A permit inherited across fork() belongs to the parent: the child cannot
release it. A Permit cannot be pickled.
)doc")
      .def(
          "release",
          [](permit_object& p) {
            shmsem::Permit taken = p.take();
            without_gil([&] { taken.release(); });
          },
          R"doc(Frees the seats and wakes waiters; a second call does nothing.

Raises PermitNotHeldError if the seats were lost first (the message says why
and since when); the permit is released either way.)doc")
      .def(
          "extend",
          [](permit_object& p, const py::object& ttl) {
            auto d = duration_ms(ttl, "ttl", false);
            if (!d) throw py::value_error("shmsem: extend() needs a ttl in seconds, got None");
            without_gil([&] { p.permit.extend(*d); });
          },
          py::arg("ttl"),
          R"doc(Sets the lease to expire `ttl` seconds from now (a permit without TTL gains
one). Raises ExtensionError if the seats were lost first.)doc")
      .def_property_readonly(
          "is_held",
          [](const permit_object& p) {
            if (!p.asks_server) return p.permit.is_held();
            return without_gil([&] { return p.permit.is_held(); });
          },
          "True while the seats are held: false once released, reaped, force-released or "
          "expired. Reads the segment, without a lock (on Redis: a round trip).")
      .def_property_readonly(
          "id", [](const permit_object& p) { return p.permit.id(); },
          "The lease's id, unique within its semaphore (0 once released).")
      .def_property_readonly(
          "weight", [](const permit_object& p) { return p.permit.weight(); },
          "The number of seats this permit holds.")
      .def_property_readonly(
          "fencing_token", [](const permit_object& p) { return p.permit.fencing_token(); },
          R"doc(The grant's fencing token: it strictly increases with every grant of the
semaphore, so a resource that remembers the highest token it accepted can
refuse a holder whose seats were lost. Every grant on Redis has one; on shared
memory only a semaphore created with fencing=True does, and it is 0 otherwise.
With capacity > 1 tokens order grants, not seats.)doc")
      .def_property_readonly(
          "key", [](const permit_object& p) { return std::string(p.permit.key()); },
          "The semaphore's key ('' once released).")
      .def_property_readonly(
          "ttl",
          [](const permit_object& p) -> py::object {
            if (auto t = p.permit.ttl())
              return py::float_(std::chrono::duration<double>(*t).count());
            return py::none();
          },
          "The lease's TTL in seconds, or None.")
      .def_property_readonly(
          "acquired_at", [](const permit_object& p) { return seconds_of(p.permit.acquired_at()); },
          "When the seats were granted, on the time.monotonic() clock.")
      .def_property_readonly(
          "expires_at",
          [](const permit_object& p) -> py::object {
            if (auto t = p.permit.expires_at()) return py::float_(seconds_of(*t));
            return py::none();
          },
          "When the lease expires, on the time.monotonic() clock, or None.")
      .def_property_readonly(
          "auto_renewing", [](const permit_object& p) { return p.permit.auto_renewing(); },
          "True while a background thread renews the lease.")
      .def(
          "stop_auto_renew", [](permit_object& p) { p.permit.stop_auto_renew(); },
          "Stops the background renewal; the lease then expires unless extended.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](permit_object& p, const py::object&, const py::object&, const py::object&) {
             release_on_exit(p);
             return false;
           })
      .def("__repr__", &permit_repr)
      .def("__reduce__",
           [](const permit_object&) -> py::object {
             throw py::type_error(
                 "shmsem: a Permit cannot be pickled: its seats belong to the process that "
                 "acquired them; pass the Semaphore (or its key) and acquire in the other "
                 "process");
           })
      .def(
          "_release_quietly",
          [](permit_object& p) {
            shmsem::Permit taken = p.take();
            without_gil([&] { shmsem::Permit dying(std::move(taken)); });
          },
          "Releases without raising (a lost seat is logged).");
}

void register_semaphore(py::module_& m) {
  py::class_<semaphore_object> semaphore_type(m, "Semaphore", R"doc(
A fleet-wide counting semaphore: at most `capacity` seats are held at once
across every process on this host that opens the same key, whatever its
language (C, C++ or Python).

Semaphore(key, permits) opens the semaphore, creating it with `permits` seats
if it does not exist; an existing one keeps its capacity (use set_capacity()).
Waiters are served in FIFO order across processes. A holder that dies, even by
SIGKILL, never leaks its seats. A handle may be used from many threads, and
works in a child after fork() (gunicorn --preload).
Seats taken through this object stay held until released, through their
Permit or through release(), as with threading.Semaphore; `with sem:` takes
one and gives it back. It pickles by key and options: a multiprocessing
child opens the same semaphore (without the seats of this process).
)doc");
  def_semaphore_open(semaphore_type);
  def_semaphore_seats(semaphore_type);
  def_semaphore_figures(semaphore_type);
  def_semaphore_admin(semaphore_type);
  def_semaphore_by_key(semaphore_type);
}

void register_module_functions(py::module_& m) {
  m.def(
      "shutdown_all", [] { without_gil([] { shmsem::shutdown_all(); }); },
      "shutdown() for every handle of this process, and for handles opened later.");
  m.def("runtime_version", &shmsem::runtime_version,
        "The version of the loaded libshmsem.so.0, 'X.Y.Z'.");
  m.def("_drain_logs", [] { drain_logs(); });
  m.attr("_signal_tick") = std::chrono::duration<double>(kSignalTick).count();
}

}  // namespace

// Order matters: errors before anything that raises them, and CancelToken
// and Permit before the Semaphore signatures that name them.
PYBIND11_MODULE(_shmsem, m) {
  m.doc() = "The compiled core of the shmsem package; use `import shmsem`.";
  // Python runs signal handlers in its main thread, which need not be the
  // one importing this module.
  main_thread_id =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  register_errors();
  register_process_hooks();
  register_cancel_token(m);
  register_permit(m);
  register_semaphore(m);
  register_module_functions(m);
}
