// bounded_test.cpp: shmsem::bounded() within one process (threads only):
// keys, policies, fail modes, method errors, concurrency and composition.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "service_test_util.hpp"
#include "test_support.hpp"

// Designated initializers that name only some fields are the documented
// style of these options; GCC 12 warns about the fields left out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::unique_key;

std::uint64_t acquired(std::string_view key) {
  return Semaphore::attach(key).stats().acquired;
}

TEST(Bounded, FixedKeyRunsTheBodyHoldingOneSeatAndReleases) {
  unique_key key;
  int seen_used = -1;
  auto f = bounded({.key = key.str(), .permits = 2},
                   [&](int x) { seen_used = Semaphore::attach(key).used() + x; });
  EXPECT_TRUE(f(0));
  EXPECT_EQ(seen_used, 1);
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
  EXPECT_EQ(Semaphore::attach(key).capacity(), 2);
  EXPECT_EQ(acquired(key), 1u);
}

TEST(Bounded, ReturnsTheResultInAnOptional) {
  unique_key key;
  auto f = bounded({.key = key.str()}, [](int a, int b) { return a * b; });
  std::optional<int> r = f(6, 7);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, 42);
}

TEST(Bounded, TemplateWithSeveralArgumentsMakesTheKey) {
  unique_key base;
  const std::string expected = base.str() + ":acme:7:acme";
  test::key_remover cleanup({expected});
  std::string seen_key;
  auto f = bounded({.key = base.str() + ":{1}:{0}:{1}", .permits = 1},
                   [&](int job, const std::string& tenant) {
                     EXPECT_EQ(Semaphore::attach(expected).used(), 1);
                     seen_key = tenant + std::to_string(job);
                   });
  EXPECT_TRUE(f(7, std::string("acme")));
  EXPECT_EQ(seen_key, "acme7");
  EXPECT_EQ(acquired(expected), 1u);
  EXPECT_THROW(Semaphore::attach(base.str() + ":{1}:{0}:{1}"), SegmentError);
}

TEST(Bounded, TemplateTakesFmtSpecsAndLiteralBraces) {
  unique_key base;
  const std::string expected = base.str() + ":{007}";
  test::key_remover cleanup({expected});
  auto f = bounded({.key = base.str() + ":{{{0:03}}}"}, [](int) {});
  EXPECT_TRUE(f(7));
  EXPECT_EQ(acquired(expected), 1u);
}

TEST(Bounded, FixedKeyWithEscapedBracesIsLiteral) {
  unique_key base;
  const std::string expected = base.str() + "{x}";
  test::key_remover cleanup({expected});
  auto f = bounded({.key = base.str() + "{{x}}"}, [] {});
  EXPECT_TRUE(f());
  EXPECT_EQ(acquired(expected), 1u);
}

// The key is made from what the body receives: the argument converted to
// the parameter's type, so one id is one key whatever the caller passed.
TEST(Bounded, TemplateFormatsTheConvertedArgumentTheBodyReceives) {
  unique_key base;
  const std::string id3 = base.str() + ":3";
  test::key_remover cleanup({id3, base.str() + ":3.7", base.str() + ":3.2"});
  std::vector<int> seen;
  auto f = bounded({.key = base.str() + ":{0}", .permits = 1, .wait_timeout = 0ms}, [&](int id) {
    EXPECT_EQ(Semaphore::attach(id3).used(), 1) << "the seat is not on " << id3;
    seen.push_back(id);
  });
  EXPECT_TRUE(f(3));
  EXPECT_TRUE(f(3.7));
  EXPECT_TRUE(f(3.2));
  EXPECT_EQ(seen, (std::vector<int>{3, 3, 3}));
  EXPECT_EQ(acquired(id3), 3u);
}

TEST(Bounded, CallsWithTheSameConvertedArgumentShareTheirSeat) {
  unique_key base;
  test::key_remover cleanup({base.str() + ":3", base.str() + ":3.2"});
  int inner_ran = 0;
  int depth = 0;
  std::function<bool(double)> call;
  auto f = bounded({.key = base.str() + ":{0}",
                    .permits = 1,
                    .wait_timeout = 0ms,
                    .on_unavailable = OnUnavailable::skip},
                   [&](int) {
                     // While f(3) holds id 3's only seat, f(3.2) is a call
                     // for id 3 too.
                     if (depth++ > 0) {
                       ++inner_ran;
                       return;
                     }
                     EXPECT_FALSE(call(3.2))
                         << "a second call for id 3 ran beside the first under permits = 1";
                   });
  call = [&](double id) { return f(id); };
  EXPECT_TRUE(f(3));
  EXPECT_EQ(inner_ran, 0);
}

TEST(Bounded, CharParameterGivesOneKeyForTheSameCharacter) {
  unique_key base;
  const std::string chA = base.str() + ":chA";
  test::key_remover cleanup({chA, base.str() + ":ch65"});
  auto g = bounded({.key = base.str() + ":ch{0}"}, [](char) {});
  EXPECT_TRUE(g('A'));
  EXPECT_TRUE(g(65));
  EXPECT_EQ(acquired(chA), 2u);
}

TEST(Bounded, ConvertedStringArgumentReachesTheBodyAndTheKey) {
  unique_key base;
  const std::string expected = base.str() + ":acme";
  test::key_remover cleanup({expected});
  std::string seen;
  auto f = bounded({.key = base.str() + ":{0}"}, [&](const std::string& tenant) { seen = tenant; });
  EXPECT_TRUE(f("acme"));
  EXPECT_EQ(seen, "acme");
  EXPECT_EQ(acquired(expected), 1u);
}

TEST(Bounded, FormatSpecThatDoesNotFitTheParameterIsRejectedByBounded) {
  EXPECT_THROW(bounded({.key = "k:{0:d}"}, [](const std::string&) {}), std::invalid_argument);
  EXPECT_THROW(bounded({.key = "k:{0:s}"}, [](double) {}), std::invalid_argument);
  EXPECT_THROW(bounded({.key = "k:{0:.2}"}, [](int) {}), std::invalid_argument);
  EXPECT_THROW(bounded({.key = "k:{1:q}"}, [](int, int) {}), std::invalid_argument);
  try {
    bounded({.key = "k:{0:d}"}, [](std::string_view) {});
    ADD_FAILURE() << "accepted {0:d} for a string";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("k:{0:d}"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(bounded({.key = "k:{0:>8}"}, [](const std::string&) {}));
  EXPECT_NO_THROW(bounded({.key = "k:{0:04x}"}, [](int) {}));
  EXPECT_NO_THROW(bounded({.key = "k:{0:.2f}"}, [](double) {}));
  EXPECT_NO_THROW(bounded({.key = "k:{0:c}"}, [](char) {}));
  EXPECT_NO_THROW(bounded({.key = "k:{1:d}"}, [](const std::string&, long) {}));
}

TEST(Bounded, TemplateNamingAMissingArgumentIsRejectedByBounded) {
  bool ran = false;
  EXPECT_THROW(bounded({.key = "k:{2}"}, [&](int, int) { ran = true; }), std::invalid_argument);
  EXPECT_THROW(bounded({.key = "k:{0}"}, [&] { ran = true; }), std::invalid_argument);
  EXPECT_FALSE(ran);
}

TEST(Bounded, MalformedTemplatesAreRejectedByBounded) {
  auto fn = [](int) {};
  EXPECT_THROW(bounded({.key = "k:{}"}, fn), std::invalid_argument);
  EXPECT_THROW(bounded({.key = "k:{0"}, fn), std::invalid_argument);
  EXPECT_THROW(bounded({.key = "k:0}"}, fn), std::invalid_argument);
  EXPECT_THROW(bounded({.key = "k:{x}"}, fn), std::invalid_argument);
  EXPECT_THROW(bounded({.key = "k:{64}"}, fn), std::invalid_argument);
  EXPECT_THROW(bounded({.key = ""}, fn), std::invalid_argument);
  EXPECT_THROW(bounded({.key = "k", .permits = 0}, fn), std::invalid_argument);
  EXPECT_NO_THROW(bounded({.key = "k:{0}"}, fn));
}

TEST(Bounded, TemplateNamingAnUnformattableArgumentIsRejected) {
  struct opaque {};
  EXPECT_THROW(bounded({.key = "k:{0}"}, [](opaque) {}), std::invalid_argument);
  EXPECT_NO_THROW(bounded({.key = "k:{1}"}, [](opaque, int) {}));
}

TEST(Bounded, GenericCallableWithPlaceholdersIsRejected) {
  EXPECT_THROW(bounded({.key = "k:{0}"}, [](auto) {}), std::invalid_argument);
  EXPECT_NO_THROW(bounded({.key = "k"}, [](auto) {}));
}

TEST(Bounded, KeyCallableMakesTheKeyFromTheArguments) {
  unique_key base;
  const std::string expected = base.str() + "-tenant-9";
  test::key_remover cleanup({expected});
  auto f = bounded(
      BoundedOptions{.key = [&](const std::string& t,
                                int n) { return base.str() + "-" + t + "-" + std::to_string(n); },
                     .permits = 1},
      [](const std::string&, int n) { return n; });
  EXPECT_EQ(f(std::string("tenant"), 9), 9);
  EXPECT_EQ(acquired(expected), 1u);
}

TEST(Bounded, MoveOnlyArgumentsAreForwarded) {
  unique_key base;
  test::key_remover cleanup({base.str() + ":5"});
  auto f =
      bounded({.key = base.str() + ":{0}"}, [](int id, std::unique_ptr<int> p) { return id + *p; });
  EXPECT_EQ(f(5, std::make_unique<int>(1)), 6);
}

struct method_error : std::runtime_error {
  explicit method_error(int c) : std::runtime_error("method failed"), code(c) {}
  int code;
};

TEST(Bounded, MethodErrorPropagatesUnchangedAndTheSeatIsReleased) {
  unique_key key;
  for (auto policy : {OnUnavailable::throw_error, OnUnavailable::skip}) {
    auto f = bounded({.key = key.str(), .on_unavailable = policy},
                     [](int c) -> int { throw method_error(c); });
    try {
      f(17);
      FAIL() << "the method's exception was swallowed";
    } catch (const method_error& e) {
      EXPECT_EQ(e.code, 17);
    }
    EXPECT_EQ(Semaphore::attach(key).used(), 0);
  }
  EXPECT_EQ(Semaphore::attach(key).stats().released, 2u);
}

TEST(Bounded, ThrowPolicyPropagatesAcquisitionError) {
  unique_key key;
  Permit held = acquire(key, 1);
  bool ran = false;
  auto f = bounded({.key = key.str(), .wait_timeout = 10ms}, [&] { ran = true; });
  try {
    f();
    FAIL() << "ran on a full semaphore";
  } catch (const AcquisitionError& e) {
    EXPECT_EQ(e.reason(), Reason::timeout);
  }
  EXPECT_FALSE(ran);
}

TEST(Bounded, SkipPolicyReturnsEmptyWithoutRunning) {
  unique_key key;
  Permit held = acquire(key, 1);
  int runs = 0;
  auto v = bounded({.key = key.str(), .wait_timeout = 0ms, .on_unavailable = OnUnavailable::skip},
                   [&] { ++runs; });
  auto r = bounded({.key = key.str(), .wait_timeout = 5ms, .on_unavailable = OnUnavailable::skip},
                   [&] { return ++runs; });
  EXPECT_FALSE(v());
  EXPECT_FALSE(r().has_value());
  EXPECT_EQ(runs, 0);
  held.release();
  EXPECT_TRUE(v());
  EXPECT_EQ(r(), std::optional<int>(2));
}

TEST(Bounded, NonThrowingPolicyWithoutTimeoutDoesNotWait) {
  unique_key key;
  std::optional<Permit> held = acquire(key, 1);
  std::atomic<int> runs = 0, mapped = 0;
  auto skipper =
      bounded({.key = key.str(), .on_unavailable = OnUnavailable::skip}, [&] { ++runs; });
  auto mapper = bounded({.key = key.str(),
                         .on_unavailable =
                             [&](std::string_view, Reason r) {
                               if (r == Reason::timeout) ++mapped;
                             }},
                        [&] { ++runs; });
  auto calls = std::async(std::launch::async, [&] {
    const bool skipped = !skipper();
    bool threw = false;
    try {
      mapper();
    } catch (const AcquisitionError& e) {
      threw = e.reason() == Reason::timeout;
    }
    return skipped && threw;
  });
  const bool returned = calls.wait_for(30s) == std::future_status::ready;
  held.reset();  // lets a call that waits finish, so that the failure does not hang
  EXPECT_TRUE(returned) << "a call under skip or a mapping policy waited for a seat";
  EXPECT_TRUE(calls.get());
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(mapped, 1);
}

struct busy_error : std::runtime_error {
  busy_error(std::string k, Reason r) : std::runtime_error("busy"), key(std::move(k)), reason(r) {}
  std::string key;
  Reason reason;
};

TEST(Bounded, MappingPolicyThrowsTheCallersOwnError) {
  unique_key key;
  Permit held = acquire(key, 1);
  auto f = bounded(
      {.key = key.str(),
       .wait_timeout = 5ms,
       .on_unavailable = [](std::string_view k, Reason r) { throw busy_error(std::string(k), r); }},
      [] {});
  try {
    f();
    FAIL() << "ran on a full semaphore";
  } catch (const busy_error& e) {
    EXPECT_EQ(e.key, key.str());
    EXPECT_EQ(e.reason, Reason::timeout);
  }
}

TEST(Bounded, MappingPolicyThatReturnsFallsBackToAcquisitionError) {
  unique_key key;
  Permit held = acquire(key, 1);
  int calls = 0;
  auto f = bounded({.key = key.str(),
                    .wait_timeout = 5ms,
                    .on_unavailable = [&](std::string_view, Reason) { ++calls; }},
                   [] {});
  EXPECT_THROW(f(), AcquisitionError);
  EXPECT_EQ(calls, 1);
}

TEST(Bounded, FailOpenRunsUnboundedAndWarnsOncePerKey) {
  unique_key a("a"), b("b");
  test::unopenable_key bad_a(a.str()), bad_b(b.str());
  test::log_capture log;
  int runs = 0;
  auto fa = bounded({.key = a.str()}, [&] { return ++runs; });
  auto fb = bounded({.key = b.str()}, [&] { return ++runs; });
  EXPECT_EQ(fa(), std::optional<int>(1));
  EXPECT_EQ(fa(), std::optional<int>(2));
  EXPECT_EQ(fb(), std::optional<int>(3));
  EXPECT_EQ(log.count("fail_open"), 2) << log.text();
  EXPECT_EQ(log.count("semaphore '" + a.str() + "'"), 1) << log.text();
}

TEST(Bounded, FailClosedTreatsAnUnopenableSegmentAsUnavailable) {
  unique_key key;
  test::unopenable_key bad(key.str());
  bool ran = false;
  auto thrower =
      bounded({.key = key.str(), .fail_mode = FailMode::fail_closed}, [&] { ran = true; });
  try {
    thrower();
    FAIL() << "fail_closed ran the body";
  } catch (const AcquisitionError& e) {
    EXPECT_EQ(e.reason(), Reason::error);
    EXPECT_THROW(std::rethrow_exception(e.cause()), SegmentError);
  }
  auto skipper = bounded(
      {.key = key.str(), .on_unavailable = OnUnavailable::skip, .fail_mode = FailMode::fail_closed},
      [&] { ran = true; });
  EXPECT_FALSE(skipper());
  EXPECT_FALSE(ran);
}

TEST(Bounded, ConcurrentCallsFromCopiesNeverExceedPermits) {
  unique_key key;
  std::atomic<int> inside{0}, peak{0}, runs{0};
  auto f = bounded({.key = key.str(), .permits = 2}, [&] {
    const int now = inside.fetch_add(1) + 1;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::yield();
    runs.fetch_add(1);
    inside.fetch_sub(1);
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([copy = f] {
      for (int i = 0; i < 100; ++i) copy();
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(runs.load(), 600);
  EXPECT_LE(peak.load(), 2);
  EXPECT_GE(peak.load(), 1);
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
  EXPECT_EQ(acquired(key), 600u);
}

// A caller's own wrapper, as a scheduler would apply it: run `job` each tick.
template <class Job>
int run_ticks(int ticks, Job job) {
  int ran = 0;
  for (int i = 0; i < ticks; ++i)
    if (job()) ++ran;
  return ran;
}

TEST(Bounded, ComposesWithTheCallersWrapper) {
  unique_key key;
  auto sync = bounded({.key = key.str(), .on_unavailable = OnUnavailable::skip}, [] {});
  EXPECT_EQ(run_ticks(3, sync), 3);
  Permit held = acquire(key, 1);
  auto sync_now = bounded(
      {.key = key.str(), .wait_timeout = 0ms, .on_unavailable = OnUnavailable::skip}, [] {});
  EXPECT_EQ(run_ticks(3, sync_now), 0);
}

TEST(Bounded, UsesTheGivenServiceAndItsObserver) {
  struct recorder : Observer {
    std::atomic<int> acquires{0};
    void on_acquire(const AcquireEvent& e) override {
      if (e.outcome == Outcome::acquired && e.weight == 1) acquires.fetch_add(1);
    }
  };
  auto obs = std::make_shared<recorder>();
  ServiceOptions o;
  o.handle_options.observer = obs;
  Service svc(o);
  unique_key key;
  auto f = bounded({.key = key.str(), .service = &svc}, [] {});
  f();
  f();
  EXPECT_EQ(obs->acquires.load(), 2);
  EXPECT_EQ(svc.cached(), 1u);
}

TEST(Bounded, TtlAndAutoRenewReachThePermit) {
  unique_key key;
  std::optional<std::chrono::steady_clock::time_point> expiry;
  auto f = bounded({.key = key.str(), .ttl = 60s}, [&] {
    auto h = Semaphore::attach(key).holders();
    ASSERT_EQ(h.size(), 1u);
    expiry = h[0].expires_at;
  });
  f();
  ASSERT_TRUE(expiry.has_value());
  EXPECT_GT(*expiry, std::chrono::steady_clock::now() + 30s);
}

TEST(Bounded, AutoRenewKeepsALongBodysLeaseAlive) {
  unique_key key;
  bool renewed = false;
  auto f = bounded({.key = key.str(), .ttl = 200ms, .auto_renew = true}, [&] {
    Semaphore sem = Semaphore::attach(key);
    const auto first = sem.holders().at(0).expires_at.value();
    // Outlive the first expiry: the lease must be pushed forward, not lapse.
    renewed = test::eventually(
        [&] {
          auto h = sem.holders();
          return h.size() == 1 && h[0].expires_at.value() > first &&
                 std::chrono::steady_clock::now() > first + 50ms &&
                 h[0].state == HolderState::alive;
        },
        10s);
  });
  EXPECT_TRUE(f());
  EXPECT_TRUE(renewed);
  EXPECT_EQ(Semaphore::attach(key).stats().expired, 0u);
  EXPECT_EQ(Semaphore::attach(key).stats().released, 1u);
}

}  // namespace
}  // namespace shmsem
