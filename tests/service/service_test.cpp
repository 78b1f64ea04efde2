// service_test.cpp: the key-based Service API and its handle cache, within
// one process (threads only).
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "service_test_util.hpp"
#include "test_support.hpp"

// Designated initializers that name only some fields are the documented
// style of these options; GCC 12 warns about the fields left out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

// Counts this thread's heap allocations, to check the cache-hit claim.
// malloc/free back every operator new and delete, so they do match.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
thread_local long t_allocations = 0;
}

void* operator new(std::size_t n) {
  ++t_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  ++t_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The nothrow forms too: the library allocates its per-thread table with
// one, and what they return reaches the operator delete replaced here.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  ++t_allocations;
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  ++t_allocations;
  return std::malloc(n ? n : 1);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::unique_key;

TEST(Service, ThreadTierHitMakesNoHeapAllocation) {
  SHMSEM_SHM_ONLY();  // elsewhere a permit allocates (Redis: a round trip; fake: a lease)
  unique_key key;
  Service svc;
  auto first = svc.semaphore(key, 2);  // miss: opens and caches
  first.reset();
  int capacities = 0;
  const long before = t_allocations;
  for (int i = 0; i < 1000; ++i) {
    auto sem = svc.semaphore(key, 2);
    capacities += sem->capacity();
  }
  const long allocations = t_allocations - before;
  EXPECT_EQ(allocations, 0);
  EXPECT_EQ(capacities, 2000);
}

TEST(Service, SharedTierHitMakesNoHeapAllocation) {
  SHMSEM_SHM_ONLY();  // elsewhere a permit allocates (Redis: a round trip; fake: a lease)
  unique_key key("target");
  std::vector<std::unique_ptr<unique_key>> others;
  Service svc;
  svc.semaphore(key, 1);
  // Push the key out of this thread's small tier; it stays in the shared one.
  for (int i = 0; i < 16; ++i) {
    others.push_back(std::make_unique<unique_key>("other" + std::to_string(i)));
    svc.semaphore(*others.back(), 1);
  }
  ASSERT_EQ(svc.cached(), 17u);
  const long before = t_allocations;
  auto sem = svc.semaphore(key, 1);
  const long allocations = t_allocations - before;
  EXPECT_EQ(allocations, 0);
  EXPECT_EQ(sem->key(), key.str());
}

TEST(Service, CacheStaysWithinItsCapacity) {
  Service svc({.cache_capacity = 4});
  std::vector<std::unique_ptr<unique_key>> keys;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(std::make_unique<unique_key>(std::to_string(i)));
    svc.semaphore(*keys.back(), 1);
    ASSERT_LE(svc.cached(), 4u);
  }
  EXPECT_GE(svc.cached(), 1u);
}

TEST(Service, EvictedHandleNeverInvalidatesALivePermit) {
  Service svc({.cache_capacity = 1});
  unique_key key("held");
  Permit p = svc.acquire(key, 1);
  std::vector<std::unique_ptr<unique_key>> keys;
  for (int i = 0; i < 20; ++i) {
    keys.push_back(std::make_unique<unique_key>(std::to_string(i)));
    svc.semaphore(*keys.back(), 1);
  }
  svc.clear();
  EXPECT_EQ(svc.cached(), 0u);
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(Semaphore::attach(key).used(), 1);
  EXPECT_NO_THROW(p.release());
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
}

TEST(Service, HandleOutlivesEviction) {
  Service svc({.cache_capacity = 1});
  unique_key a("a"), b("b");
  auto sem = svc.semaphore(a, 3);
  svc.semaphore(b, 1);  // evicts a
  svc.clear();
  Permit p = sem->acquire();
  EXPECT_EQ(sem->used(), 1);
  p.release();
}

TEST(Service, AcquireTakesOneSeatAndCreatesWithCapacity) {
  unique_key key;
  Permit p = acquire(key, 3);
  EXPECT_EQ(p.weight(), 1);
  EXPECT_EQ(p.key(), key.str());
  EXPECT_EQ(used_permits(key), 1);
  EXPECT_EQ(available_permits(key, 3), 2);
  EXPECT_EQ(Semaphore::attach(key).capacity(), 3);
  p.release();
  EXPECT_EQ(used_permits(key), 0);
}

TEST(Service, AcquireTimesOutWhenFull) {
  unique_key key;
  Permit p = acquire(key, 1);
  try {
    acquire(key, 1, {.wait_timeout = 20ms});
    FAIL() << "acquire on a full semaphore returned";
  } catch (const AcquisitionError& e) {
    EXPECT_EQ(e.reason(), Reason::timeout);
  }
}

TEST(Service, TryAcquireReturnsNulloptWhenFull) {
  unique_key key;
  auto p = try_acquire(key, 1);
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(try_acquire(key, 1).has_value());
  p->release();
  EXPECT_TRUE(try_acquire(key, 1).has_value());
}

// After the key is removed and created anew by someone else, the cache
// must not go on granting seats of the old, unlinked segment: that would
// hold a second seat under capacity 1. It may trust a cached handle for
// about a second, so the check polls.
TEST(Service, CachedHandleOfARemovedSegmentStopsGranting) {
  unique_key key;
  Service svc;
  ASSERT_TRUE(svc.try_acquire(key, 1).has_value());  // cached, then released
  ASSERT_TRUE(Semaphore::remove(key));
  Semaphore fresh = Semaphore::open(key, 1);
  Permit theirs = fresh.acquire();
  EXPECT_TRUE(test::eventually([&] { return !svc.try_acquire(key, 1).has_value(); }, 20s))
      << "the cache kept granting seats of the removed segment";
  EXPECT_TRUE(test::eventually([&] { return svc.used_permits(key) == 1; }, 20s));
  EXPECT_EQ(fresh.used(), 1);
}

TEST(Service, ZeroRecheckIntervalSeesARemovalAtTheNextLookup) {
  unique_key key;
  Service svc(ServiceOptions{.recheck_interval = 0ms});
  ASSERT_TRUE(svc.try_acquire(key, 1).has_value());
  ASSERT_TRUE(Semaphore::remove(key));
  Semaphore fresh = Semaphore::open(key, 1);
  Permit theirs = fresh.acquire();
  EXPECT_FALSE(svc.try_acquire(key, 1).has_value());
  EXPECT_EQ(svc.used_permits(key), 1);
  theirs.release();
  auto mine = svc.try_acquire(key, 1);
  ASSERT_TRUE(mine.has_value());
  EXPECT_EQ(fresh.used(), 1);
}

TEST(Service, ARemovedKeyThatIsNotCreatedAgainIsCreatedByTheNextAcquire) {
  unique_key key;
  Service svc(ServiceOptions{.recheck_interval = 0ms});
  ASSERT_TRUE(svc.try_acquire(key, 2).has_value());
  ASSERT_TRUE(Semaphore::remove(key));
  EXPECT_EQ(svc.used_permits(key), 0);
  EXPECT_THROW(Semaphore::attach(key), SegmentError);  // used_permits creates nothing
  auto p = svc.try_acquire(key, 2);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(Semaphore::attach(key).used(), 1);
}

TEST(Service, UsedPermitsOfMissingKeyIsZeroAndCreatesNothing) {
  unique_key key;
  EXPECT_EQ(used_permits(key), 0);
  EXPECT_EQ(force_release_all(key), 0);
  EXPECT_THROW(Semaphore::attach(key), SegmentError);
}

TEST(Service, AvailablePermitsNeverBelowZero) {
  unique_key key;
  Permit p = acquire(key, 1);
  EXPECT_EQ(available_permits(key, 1), 0);
  Semaphore::attach(key).set_capacity(1);
  EXPECT_EQ(available_permits(key, 5), 0);  // the fleet's capacity stands
}

TEST(Service, ForceReleaseAllCountsLiveHoldersWhoseReleaseThenThrows) {
  unique_key key;
  Permit a = acquire(key, 3);
  Permit b = acquire(key, 3);
  EXPECT_EQ(force_release_all(key), 2);
  EXPECT_EQ(used_permits(key), 0);
  EXPECT_THROW(a.release(), PermitNotHeldError);
  EXPECT_THROW(b.release(), PermitNotHeldError);
}

TEST(Service, WithPermitReturnsTheResultAndReleases) {
  unique_key key;
  int r = with_permit(key, 2, [&] {
    EXPECT_EQ(used_permits(key), 1);
    return 42;
  });
  EXPECT_EQ(r, 42);
  EXPECT_EQ(used_permits(key), 0);
}

TEST(Service, WithPermitPassesThePermitWhenAsked) {
  unique_key key;
  std::uint64_t id = 0;
  with_permit(key, 1, [&](Permit& p) { id = p.id(); });
  EXPECT_NE(id, 0u);
}

struct work_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

TEST(Service, WithPermitReleasesWhenTheWorkThrows) {
  unique_key key;
  EXPECT_THROW(with_permit(key, 1, [] { throw work_failed("boom"); }), work_failed);
  EXPECT_EQ(used_permits(key), 0);
  EXPECT_EQ(Semaphore::attach(key).stats().released, 1u);
}

TEST(Service, WithPermitRecordsTheHoldDuration) {
  unique_key key;
  with_permit(key, 1, [] {});
  with_permit(key, 1, [] {});
  const Stats s = Semaphore::attach(key).stats();
  EXPECT_EQ(s.hold.count(), 2u);
  EXPECT_EQ(s.released, 2u);
}

TEST(Service, WithPermitLogsALostSeatInsteadOfThrowing) {
  unique_key key;
  test::log_capture log;
  bool ran = false;
  EXPECT_NO_THROW(with_permit(key, 1, [&] {
    ran = true;
    EXPECT_EQ(force_release_all(key), 1);  // an operator takes the seat away
  }));
  EXPECT_TRUE(ran);
  EXPECT_NE(log.text().find("warn"), std::string::npos) << log.text();
}

TEST(Service, UnopenableSegmentIsAnAcquisitionErrorWithTheCause) {
  unique_key key;
  test::unopenable_key bad(key.str());
  try {
    acquire(key, 1);
    FAIL() << "acquire on an unopenable segment returned";
  } catch (const AcquisitionError& e) {
    EXPECT_EQ(e.reason(), Reason::error);
    ASSERT_TRUE(e.cause());
    EXPECT_THROW(std::rethrow_exception(e.cause()), SegmentError);
  }
  EXPECT_THROW(try_acquire(key, 1), AcquisitionError);
  EXPECT_THROW(with_permit(key, 1, [] {}), AcquisitionError);
  EXPECT_THROW(used_permits(key), SegmentError);
}

TEST(Service, InvalidKeyIsInvalidArgument) {
  EXPECT_THROW(acquire("", 1), std::invalid_argument);
  EXPECT_THROW(acquire(std::string(300, 'k'), 1), std::invalid_argument);
}

TEST(Service, ObserverOfTheServiceSeesEveryAcquire) {
  struct recorder : Observer {
    std::mutex mu;
    std::vector<std::pair<std::string, Outcome>> events;
    void on_acquire(const AcquireEvent& e) override {
      std::lock_guard lk(mu);
      events.emplace_back(std::string(e.key), e.outcome);
    }
  };
  auto obs = std::make_shared<recorder>();
  ServiceOptions o;
  o.handle_options.observer = obs;
  Service svc(o);
  unique_key key;
  Permit p = svc.acquire(key, 1);
  EXPECT_FALSE(svc.try_acquire(key, 1).has_value());
  std::lock_guard lk(obs->mu);
  ASSERT_EQ(obs->events.size(), 2u);
  EXPECT_EQ(obs->events[0].first, key.str());
  EXPECT_EQ(obs->events[0].second, Outcome::acquired);
  EXPECT_NE(obs->events[1].second, Outcome::acquired);
}

TEST(Service, ManyThreadsOverManyKeysKeepEachBound) {
  Service svc({.cache_capacity = 3});
  constexpr int kKeys = 6;
  std::vector<std::unique_ptr<unique_key>> keys;
  std::vector<std::atomic<int>> inside(kKeys);
  std::atomic<int> violations{0};
  for (int i = 0; i < kKeys; ++i) keys.push_back(std::make_unique<unique_key>(std::to_string(i)));
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 150; ++i) {
        const int k = (i * 7 + t) % kKeys;
        svc.with_permit(*keys[k], 2, [&] {
          if (inside[k].fetch_add(1) + 1 > 2) violations.fetch_add(1);
          std::this_thread::yield();
          inside[k].fetch_sub(1);
        });
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(violations.load(), 0);
  for (auto& k : keys) EXPECT_EQ(Semaphore::attach(*k).used(), 0);
  EXPECT_LE(svc.cached(), 4u);
}

}  // namespace
}  // namespace shmsem
