// Single-process behaviour of Semaphore and Permit. Threads stand in for
// other processes where only the ordering matters; the ipc tests fork.
#include <gtest/gtest.h>
#include <shmsem/shmsem.hpp>

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::asleep_in_futex;
using test::eventually;
using test::on_fake;
using test::on_redis;
using test::test_backend;
using test::unique_key;

AcquisitionError acquire_error(Semaphore& s, int n, const AcquireOptions& o = {}) {
  try {
    s.acquire(n, o);
  } catch (const AcquisitionError& e) {
    return e;
  }
  ADD_FAILURE() << "acquire(" << n << ") succeeded";
  return AcquisitionError(Reason::error, "none");
}

TEST(Semaphore, OpenCreatesThenAttachesWithoutChangingCapacity) {
  unique_key k;
  auto a = Semaphore::open(k, 3);
  auto b = Semaphore::open(k, 7);  // logs a warning; the fleet's bound stands
  EXPECT_EQ(a.capacity(), 3);
  EXPECT_EQ(b.capacity(), 3);
  auto p = a.acquire();
  EXPECT_EQ(b.used(), 1);
}

TEST(Semaphore, AttachFindsOnlyExistingSemaphores) {
  unique_key k;
  try {
    Semaphore::attach(k);
    FAIL() << "attach created a segment";
  } catch (const SegmentError& e) {
    EXPECT_EQ(e.code(), errc::not_found);
    EXPECT_NE(std::string(e.what()).find(k.str()), std::string::npos);
  }
  auto s = Semaphore::open(k, 2);
  EXPECT_EQ(Semaphore::attach(k).capacity(), 2);
}

// What a caller asks instead of parsing keys: the same answer from the key
// before opening and from the handle, and each one true to what the
// backend then does.
TEST(Semaphore, CapabilitiesSayWhatTheBackendCanDoBeforeAndAfterOpen) {
  unique_key k;
  const Capabilities before = Semaphore::capabilities_of(k.str());
  auto s = Semaphore::open(k, 2);
  const Capabilities c = s.capabilities();
  EXPECT_EQ(c.reads_without_io, before.reads_without_io);
  EXPECT_EQ(c.barging, before.barging);
  EXPECT_EQ(c.process_liveness, before.process_liveness);
  EXPECT_EQ(c.segment_file, before.segment_file);
  if (test_backend() != "shm") {
    // A server answers over the network; the fake from memory.
    EXPECT_EQ(c.reads_without_io, on_fake());
    EXPECT_FALSE(c.barging);
    EXPECT_FALSE(c.process_liveness);
    EXPECT_FALSE(c.segment_file);
    EXPECT_TRUE(c.fencing);
    EXPECT_NE(s.acquire().fencing_token(), 0u);
    EXPECT_THROW(Semaphore::segment_path(k.str()), std::invalid_argument);
    EXPECT_THROW(s.inheritable_liveness_fd(), std::logic_error);
  } else {
    EXPECT_TRUE(c.reads_without_io);
    EXPECT_TRUE(c.barging);
    EXPECT_TRUE(c.process_liveness);
    EXPECT_TRUE(c.segment_file);
    // Tokens only where the creator asked for them; the key alone says
    // only that they may be there.
    EXPECT_FALSE(c.fencing);
    EXPECT_TRUE(before.fencing);
    EXPECT_EQ(s.acquire().fencing_token(), 0u);
    unique_key f;
    EXPECT_TRUE(Semaphore::open(f, 1, {.fencing = true}).capabilities().fencing);
    EXPECT_EQ(Semaphore::segment_path(k.str()).rfind("/dev/shm/", 0), 0u);
    auto p = s.acquire();
    const int fd = s.inheritable_liveness_fd();
    EXPECT_GE(fd, 0);
    ::close(fd);
  }
}

TEST(Semaphore, CapabilitiesOfAUrlNoBackendServesNameItsScheme) {
  for (const char* key : {"http://example.com/x", "valkey+unix:///tmp/s?key=k"}) {
    try {
      Semaphore::capabilities_of(key);
      ADD_FAILURE() << key << " has capabilities";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      const std::string k = key;
      EXPECT_NE(what.find(k.substr(0, k.find("://") + 3)), std::string::npos) << what;
    }
  }
  EXPECT_THROW(Semaphore::capabilities_of(""), std::invalid_argument);
}

TEST(Semaphore, BadArgumentsThrowInvalidArgument) {
  unique_key k;
  EXPECT_THROW(Semaphore::open(k, 0), std::invalid_argument);
  EXPECT_THROW(Semaphore::open(k, -1), std::invalid_argument);
  EXPECT_THROW(Semaphore::open(k, kMaxCapacity + 1), std::invalid_argument);
  EXPECT_THROW(Semaphore::open(k, 1, {.ttl = -5ms}), std::invalid_argument);
  auto s = Semaphore::open(k, 2);
  EXPECT_THROW(s.acquire(0), std::invalid_argument);
  EXPECT_THROW(s.acquire(-3), std::invalid_argument);
  EXPECT_THROW(s.try_acquire(0), std::invalid_argument);
  EXPECT_THROW(s.acquire(1, {.ttl = -1ms}), std::invalid_argument);
  EXPECT_THROW(s.acquire(1, {.ttl = kMaxDuration + 1ms}), std::invalid_argument);
  EXPECT_THROW(s.acquire(1, {.wait_timeout = kMaxDuration + 1ms}), std::invalid_argument);
  EXPECT_THROW(s.set_capacity(0), std::invalid_argument);
  EXPECT_THROW(s.set_capacity(kMaxCapacity + 1), std::invalid_argument);
  auto p = s.acquire();
  EXPECT_THROW(p.extend(0ms), std::invalid_argument);
  EXPECT_THROW(p.extend(-1ms), std::invalid_argument);
  EXPECT_EQ(s.used(), 1);
}

TEST(Semaphore, AcquireIsAllOrNothing) {
  unique_key k;
  auto s = Semaphore::open(k, 3);
  auto p = s.acquire(2);
  EXPECT_EQ(s.used(), 2);
  auto e = acquire_error(s, 2, {.wait_timeout = 20ms});
  EXPECT_EQ(e.reason(), Reason::timeout);
  EXPECT_EQ(e.code(), std::errc::timed_out);
  EXPECT_EQ(s.used(), 2) << "a failed weighted acquire must not keep partial seats";
  EXPECT_EQ(p.weight(), 2);
}

TEST(Semaphore, MoreThanCapacityIsRejectedAtCallTime) {
  unique_key k;
  auto s = Semaphore::open(k, 2);
  EXPECT_EQ(acquire_error(s, 3).reason(), Reason::exceeds_capacity);
  EXPECT_FALSE(s.try_acquire(3).has_value());
  EXPECT_EQ(s.stats().rejected, 1u);
}

TEST(Semaphore, ZeroWaitBudgetMakesOneAttempt) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire(1, {.wait_timeout = 0ms});
  EXPECT_EQ(acquire_error(s, 1, {.wait_timeout = 0ms}).reason(), Reason::timeout);
  EXPECT_EQ(acquire_error(s, 1, {.wait_timeout = -10ms}).reason(), Reason::timeout);
}

TEST(Semaphore, TryAcquireNeverWaits) {
  unique_key k;
  auto s = Semaphore::open(k, 2);
  auto a = s.try_acquire(2);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(s.try_acquire().has_value());
  a->release();
  EXPECT_TRUE(s.try_acquire().has_value());
  EXPECT_GE(s.stats().try_failures, 1u);
}

TEST(Semaphore, ReleaseFreesAndSecondReleaseDoesNothing) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire();
  EXPECT_TRUE(p.is_held());
  p.release();
  EXPECT_EQ(s.used(), 0);
  EXPECT_FALSE(p.is_held());
  EXPECT_NO_THROW(p.release());
  EXPECT_EQ(s.used(), 0);
  EXPECT_EQ(s.stats().released, 1u);
}

TEST(Semaphore, PermitIdsAreUniqueAndKeysMatch) {
  unique_key k;
  auto s = Semaphore::open(k, 2);
  auto a = s.acquire();
  auto b = s.acquire();
  EXPECT_NE(a.id(), 0u);
  EXPECT_NE(a.id(), b.id());
  EXPECT_EQ(a.key(), k.str());
  EXPECT_EQ(s.key(), k.str());
}

TEST(Semaphore, DestructorReleasesQuietly) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  { auto p = s.acquire(); }
  EXPECT_EQ(s.used(), 0);
  {
    auto p = s.acquire();
    s.force_release_all();
  }  // lost seat: logged, not thrown
  EXPECT_EQ(s.used(), 0);
}

TEST(Semaphore, PermitOutlivesItsSemaphoreHandle) {
  unique_key k;
  Permit p;
  {
    auto s = Semaphore::open(k, 1);
    p = s.acquire();
  }
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(p.key(), k.str());
  auto other = Semaphore::open(k, 1);
  EXPECT_EQ(other.used(), 1);
  p.release();
  EXPECT_EQ(other.used(), 0);
}

// The first acquire of a thread takes the lock and fills its slot cache;
// from the second on, an uncontended acquire is lock-free.
Permit lock_free_permit(Semaphore& s) {
  s.acquire().release();
  return s.acquire();
}

TEST(Semaphore, LockFreePermitOutlivesItsHandleAndTheMappingGoesWithIt) {
  SHMSEM_SHM_ONLY();  // a mapping and a lock-free permit are shared memory's
  unique_key k;
  Permit p;
  {
    auto s = Semaphore::open(k, 1);
    p = lock_free_permit(s);
  }
  EXPECT_TRUE(p.is_held());
  // Still attached for the permit's sake: the segment is in use.
  EXPECT_FALSE(Semaphore::remove_if_unused(k));
  p.release();
  // The last pin gone with no handle left: this process detached.
  EXPECT_TRUE(Semaphore::remove_if_unused(k));
}

TEST(Semaphore, LastPermitAndLastHandleMayGoAtOnceOnTwoThreads) {
  SHMSEM_SHM_ONLY();  // the race is over unmapping a segment
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    unique_key k;
    auto s = std::make_unique<Semaphore>(Semaphore::open(k, 2));
    Permit p = lock_free_permit(*s);
    std::atomic<int> ready{0};
    auto meet = [&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
    };
    std::thread releaser([&] {
      meet();
      p.release();
    });
    std::thread closer([&] {
      meet();
      s.reset();
    });
    releaser.join();
    closer.join();
    ASSERT_TRUE(Semaphore::remove_if_unused(k)) << "the mapping outlived both";
  }
}

// An observer runs inside its release, while the mapping is kept for it.
// One that opens a semaphore there must not deadlock with a thread that
// drops the last handle at the same time and waits for that release.
struct opening_observer : Observer {
  std::string other;
  std::atomic<bool>* closing = nullptr;
  std::atomic<bool> armed{false};
  std::atomic<bool> opened{false};
  void on_release(const ReleaseEvent&) override {
    if (!armed.load()) return;
    while (!closing->load()) {
    }
    Semaphore::open(other, 1);  // takes the process's registry mutex
    opened = true;
  }
};

TEST(Semaphore, ReleaseObserverThatOpensASemaphoreDoesNotDeadlockWithTheLastHandle) {
  unique_key k, other;
  auto obs = std::make_shared<opening_observer>();
  std::atomic<bool> closing{false};
  obs->other = other.str();
  obs->closing = &closing;
  auto s = std::make_unique<Semaphore>(Semaphore::open(k, 1, {.observer = obs}));
  Permit p = lock_free_permit(*s);
  obs->armed = true;
  auto released = std::async(std::launch::async, [&] { p.release(); });
  auto closed = std::async(std::launch::async, [&] {
    closing = true;
    s.reset();
  });
  ASSERT_EQ(released.wait_for(30s), std::future_status::ready) << "the release deadlocked";
  ASSERT_EQ(closed.wait_for(30s), std::future_status::ready) << "the handle's drop deadlocked";
  EXPECT_TRUE(obs->opened.load());
  EXPECT_TRUE(Semaphore::remove_if_unused(k));
}

TEST(Semaphore, LockFreePermitReleasedOnAnotherThreadReturnsItsSeat) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  Permit p = lock_free_permit(s);
  std::thread([&] {
    p.release();
    // The releasing thread can use the seat at once, lock-free or not.
    auto q = s.try_acquire();
    EXPECT_TRUE(q.has_value());
  }).join();
  EXPECT_EQ(s.used(), 0);
  const Stats st = s.stats();
  EXPECT_EQ(st.acquired, 3u);
  EXPECT_EQ(st.released, 3u);
  EXPECT_EQ(st.hold.count(), 3u);
}

// Each wait and each hold is counted in the bucket of its length. The
// first acquire finds the seat free; the second queues, and the first is
// held for at least 20 ms after that. The clock here brackets the first's
// hold and the second's wait from inside and from outside, so each must be
// in a bucket between those of the two brackets, widened by the
// resolution of the clock the backend measures with (shared memory: the
// coarse monotonic clock, one kernel tick; Redis: the server's TIME, 1 us).
TEST(Semaphore, StatsCountEachWaitAndHoldInTheBucketOfItsLength) {
  using clock = std::chrono::steady_clock;
  timespec res{};
  ASSERT_EQ(::clock_getres(CLOCK_MONOTONIC_COARSE, &res), 0);
  const clock::duration tick =
      on_redis() ? clock::duration::zero()
                 : std::chrono::seconds(res.tv_sec) + std::chrono::nanoseconds(res.tv_nsec);
  const auto bucket_of = [](clock::duration d) {
    const double seconds = std::chrono::duration<double>(d).count();
    std::size_t b = 0;
    while (b < Histogram::kBounds.size() && seconds > Histogram::kBounds[b]) ++b;
    return b;
  };
  const auto in_buckets = [](const Histogram& h, std::size_t from, std::size_t to) {
    std::uint64_t n = 0;
    for (std::size_t b = from; b <= to; ++b) n += h.counts[b];
    return n;
  };
  unique_key k;
  auto s = Semaphore::open(k, 1);
  const auto before_first = clock::now();
  auto first = s.acquire();
  const auto first_granted = clock::now();
  clock::time_point asked, granted;
  std::thread second([&] {
    asked = clock::now();
    auto p = s.acquire();
    granted = clock::now();
    p.release();
  });
  if (!eventually([&] { return s.waiters() == 1; }, 10s)) {
    first.release();
    second.join();
    FAIL() << "the second acquire was never seen waiting";
  }
  const auto queued = clock::now();
  std::this_thread::sleep_for(20ms);  // the length measured, not a synchronisation
  const auto releasing = clock::now();
  first.release();
  const auto released = clock::now();
  second.join();
  const Stats st = s.stats();
  EXPECT_EQ(st.wait.count(), 2u);
  EXPECT_EQ(st.hold.count(), 2u);
  EXPECT_GE(in_buckets(st.hold, bucket_of(releasing - first_granted - tick),
                       bucket_of(released - before_first + tick)),
            1u);
  EXPECT_GE(
      in_buckets(st.wait, bucket_of(releasing - queued - tick), bucket_of(granted - asked + tick)),
      1u);
  const double floor = std::chrono::duration<double>(20ms - tick).count();
  EXPECT_GE(st.hold.sum_seconds, floor);
  EXPECT_GE(st.wait.sum_seconds, floor);
}

TEST(Semaphore, PermitCanBeReleasedFromAnotherThread) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire();
  std::thread([&] { p.release(); }).join();
  EXPECT_EQ(s.used(), 0);
}

TEST(Semaphore, MovedPermitKeepsTheLease) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto a = s.acquire();
  Permit b = std::move(a);
  EXPECT_FALSE(a);
  EXPECT_TRUE(b.is_held());
  EXPECT_EQ(s.used(), 1);
  Permit c;
  c = std::move(b);
  EXPECT_EQ(s.used(), 1);
  c.release();
  EXPECT_EQ(s.used(), 0);
}

TEST(Semaphore, ForceReleaseMakesHoldersSeeTheLoss) {
  unique_key k;
  auto s = Semaphore::open(k, 3);
  auto a = s.acquire();
  auto b = s.acquire(2);
  EXPECT_EQ(s.force_release_all(), 2);
  EXPECT_EQ(s.used(), 0);
  EXPECT_FALSE(a.is_held());
  EXPECT_THROW(a.extend(1s), ExtensionError);
  try {
    b.release();
    FAIL() << "release of a force-released permit did not throw";
  } catch (const PermitNotHeldError& e) {
    EXPECT_NE(std::string(e.what()).find("force-released"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(k.str()), std::string::npos) << e.what();
    EXPECT_FALSE(e.inherited()) << "a lost seat is not a copy inherited across fork";
  }
  EXPECT_NO_THROW(b.release());  // already empty
  auto st = s.stats();
  EXPECT_EQ(st.force_released, 2u);
  EXPECT_EQ(st.reclaimed_seats, 3u);
}

TEST(Semaphore, ExpiredLeaseCountsAsLostBeforeItIsReclaimed) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire(1, {.ttl = 30ms});
  ASSERT_TRUE(p.ttl().has_value());
  ASSERT_TRUE(p.expires_at().has_value());
  ASSERT_TRUE(eventually([&] { return !p.is_held(); }, 5s));
  EXPECT_EQ(s.used(), 1) << "nobody reclaimed it yet";
  EXPECT_THROW(p.extend(1s), ExtensionError);
  try {
    p.release();
    FAIL() << "release of an expired permit did not throw";
  } catch (const PermitNotHeldError& e) {
    EXPECT_NE(std::string(e.what()).find("TTL"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.used(), 0) << "the release reclaimed the expired seat";
  EXPECT_EQ(s.stats().expired, 1u);
}

TEST(Semaphore, ExpiredSeatIsReclaimedByTheNextAcquire) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire(1, {.ttl = 20ms});
  auto q = s.acquire(1, {.wait_timeout = 10s});  // waits for the expiry
  EXPECT_TRUE(q.is_held());
  EXPECT_FALSE(p.is_held());
  EXPECT_EQ(s.stats().expired, 1u);
}

TEST(Semaphore, ZeroTtlMeansNoExpiryDespiteTheDefault) {
  unique_key k;
  auto s = Semaphore::open(k, 2, {.ttl = 10ms});
  auto p = s.acquire(1, {.ttl = 0ms});
  EXPECT_FALSE(p.ttl().has_value());
  EXPECT_FALSE(p.expires_at().has_value());
  auto d = s.acquire();
  ASSERT_TRUE(d.ttl().has_value());
  EXPECT_EQ(*d.ttl(), 10ms);
}

TEST(Semaphore, DefaultTtlAppliesToPermits) {
  unique_key k;
  auto s = Semaphore::open(k, 2, {.ttl = 60s});
  auto p = s.acquire();
  ASSERT_TRUE(p.ttl().has_value());
  EXPECT_EQ(*p.ttl(), 60s);
}

TEST(Semaphore, ExtendPushesTheExpiry) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire(1, {.ttl = 50ms});
  const auto before = *p.expires_at();
  p.extend(10s);
  EXPECT_GT(*p.expires_at(), before + 5s);
  EXPECT_TRUE(p.is_held());
  auto no_ttl = Semaphore::open(k, 1);
  p.release();
  auto q = no_ttl.acquire();
  EXPECT_FALSE(q.expires_at().has_value());
  q.extend(5s);  // a permit without TTL gains one
  EXPECT_TRUE(q.expires_at().has_value());
}

TEST(Semaphore, AutoRenewKeepsTheLeaseAlive) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire(1, {.ttl = 60ms, .auto_renew = true});
  EXPECT_TRUE(p.auto_renewing());
  const auto first = *p.expires_at();
  // Renewal happens every TTL/3: the expiry must move past its first value.
  ASSERT_TRUE(eventually([&] { return *p.expires_at() > first + 60ms; }, 10s));
  EXPECT_TRUE(p.is_held());
  p.stop_auto_renew();
  EXPECT_FALSE(p.auto_renewing());
  ASSERT_TRUE(eventually([&] { return !p.is_held(); }, 10s)) << "the lease must lapse once stopped";
  EXPECT_THROW(p.release(), PermitNotHeldError);
}

// An extension with a shorter TTL must also shorten the renewal cadence:
// at the old one (every 10 s here) the lease would lapse at 3 s.
TEST(Semaphore, ExtendingAnAutoRenewingPermitRenewsAtTheNewCadence) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire(1, {.ttl = 30s, .auto_renew = true});
  p.extend(3s);
  EXPECT_EQ(p.ttl(), 3s);
  const auto extended = *p.expires_at();
  EXPECT_LE(extended, Permit::clock::now() + 3s);
  ASSERT_TRUE(eventually([&] { return *p.expires_at() > extended; }, 10s))
      << "no renewal within 10 s of extend(3s)";
  EXPECT_TRUE(p.is_held());
  EXPECT_TRUE(p.auto_renewing());
  EXPECT_LE(*p.expires_at(), Permit::clock::now() + 3s) << "renewed with the old TTL";
}

TEST(Semaphore, AutoRenewMarksAPermitLostWhenItsSeatIsTaken) {
  unique_key k;
  auto s = Semaphore::open(k, 1, {.ttl = 60ms, .auto_renew = true});
  auto p = s.acquire();
  EXPECT_TRUE(p.auto_renewing());
  s.force_release_all();
  ASSERT_TRUE(eventually([&] { return !p.auto_renewing(); }, 10s));
  EXPECT_FALSE(p.is_held());
}

TEST(Semaphore, BlockedAcquireIsWokenByRelease) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire();
  auto f = std::async(std::launch::async, [&] { return s.acquire(1, {.wait_timeout = 30s}); });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  p.release();
  auto q = f.get();
  EXPECT_TRUE(q.is_held());
  EXPECT_EQ(s.waiters(), 0);
}

TEST(Semaphore, StopTokenCancelsAWait) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire();
  std::stop_source stop;
  auto f = std::async(std::launch::async,
                      [&] { return acquire_error(s, 1, {.stop = stop.get_token()}); });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  stop.request_stop();
  EXPECT_EQ(f.get().reason(), Reason::cancelled);
  EXPECT_EQ(s.waiters(), 0);
  EXPECT_EQ(s.used(), 1);
  EXPECT_EQ(s.stats().cancelled, 1u);
}

// A token stopped before the call: the acquire that would wait ends at
// once, cancelled, and leaves nobody queued.
TEST(Semaphore, AStopTokenAlreadyStoppedCancelsAtOnce) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  auto p = s.acquire();
  std::stop_source stop;
  stop.request_stop();
  EXPECT_EQ(acquire_error(s, 1, {.stop = stop.get_token()}).reason(), Reason::cancelled);
  EXPECT_EQ(s.waiters(), 0);
  EXPECT_EQ(s.stats().cancelled, 1u);
}

struct wakeups_observer : Observer {
  std::mutex mu;
  std::map<std::uint64_t, std::uint32_t> wakeups;  // by permit id
  void on_acquire(const AcquireEvent& e) override {
    std::lock_guard g(mu);
    if (e.outcome == Outcome::acquired) wakeups[e.permit_id] = e.wakeups;
  }
};

// Only the head of the queue checks for dead holders at the short tick: a
// waiter that becomes the head because the one before it left must be
// woken to take the watch over, not sleep on at the long tick.
TEST(Semaphore, WaiterThatBecomesTheHeadIsWokenToWatch) {
  SHMSEM_SHM_ONLY();  // the head's watch over holders' lifelines is shared memory's
  unique_key k;
  auto obs = std::make_shared<wakeups_observer>();
  auto s = Semaphore::open(k, 1, {.observer = obs});
  auto held = s.acquire();
  std::stop_source stop;
  auto first = std::async(std::launch::async,
                          [&] { return acquire_error(s, 1, {.stop = stop.get_token()}); });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  std::atomic<pid_t> second_tid{0};
  auto second = std::async(std::launch::async, [&] {
    second_tid = static_cast<pid_t>(::gettid());
    return s.acquire();
  });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 2; }));
  ASSERT_TRUE(eventually([&] { return second_tid != 0 && asleep_in_futex(second_tid); }));
  stop.request_stop();  // the head leaves: the second is now the head
  EXPECT_EQ(first.get().reason(), Reason::cancelled);
  // The wake (if any) was sent before the first acquire returned. Once the
  // second sleeps again, the seat's wake is a separate one.
  ASSERT_TRUE(eventually([&] { return asleep_in_futex(second_tid); }));
  held.release();
  Permit p = second.get();
  ASSERT_TRUE(p.is_held());
  std::lock_guard g(obs->mu);
  EXPECT_GE(obs->wakeups[p.id()], 2u) << "woken to become the watcher, then for the seat";
}

TEST(Semaphore, ShutdownEndsWaitsAndKeepsHeldPermits) {
  unique_key k;
  auto s = Semaphore::open(k, 1, {.ttl = 60ms, .auto_renew = true});
  auto held = s.acquire();
  ASSERT_TRUE(held.auto_renewing());
  auto f = std::async(std::launch::async, [&] { return acquire_error(s, 1); });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  s.shutdown();
  EXPECT_EQ(f.get().reason(), Reason::shutdown);
  EXPECT_FALSE(held.auto_renewing()) << "renewal stops so the seat lapses within its TTL";
  EXPECT_EQ(s.used(), 1) << "held permits are not released";
  EXPECT_EQ(acquire_error(s, 1).reason(), Reason::shutdown);
  EXPECT_FALSE(s.try_acquire().has_value());
  ASSERT_TRUE(eventually([&] { return !held.is_held(); }, 10s));
}

TEST(Semaphore, FifoAdmitsALargeRequestDespiteSmallOnes) {
  unique_key k;
  auto s = Semaphore::open(k, 4, test::fifo());
  auto a = s.acquire();
  auto big = std::async(std::launch::async, [&] { return s.acquire(4, {.wait_timeout = 30s}); });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  // Seats are free, but a request is queued ahead: no jumping the queue.
  EXPECT_FALSE(s.try_acquire().has_value());
  auto small = std::async(std::launch::async, [&] { return s.acquire(1, {.wait_timeout = 30s}); });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 2; }));
  EXPECT_EQ(s.used(), 1);
  a.release();
  auto b = big.get();
  EXPECT_EQ(b.weight(), 4);
  EXPECT_EQ(s.used(), 4);
  b.release();
  EXPECT_TRUE(small.get().is_held());
}

TEST(Semaphore, GrowingWakesWaiters) {
  unique_key k;
  auto s = Semaphore::open(k, 2);
  auto p = s.acquire(2);
  auto f = std::async(std::launch::async, [&] { return s.acquire(1, {.wait_timeout = 30s}); });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  s.set_capacity(3);
  auto q = f.get();
  EXPECT_EQ(q.weight(), 1);
  EXPECT_EQ(s.used(), 3);
}

TEST(Semaphore, ShrinkingTakesNoSeatAndAdmitsOnlyBelowTheNewCapacity) {
  unique_key k;
  auto s = Semaphore::open(k, 4);
  std::vector<Permit> held;
  for (int i = 0; i < 4; ++i) held.push_back(s.acquire());
  s.set_capacity(2);
  EXPECT_EQ(s.capacity(), 2);
  EXPECT_EQ(s.used(), 4);
  for (auto& p : held) EXPECT_TRUE(p.is_held());
  held.pop_back();
  held.pop_back();
  EXPECT_EQ(s.used(), 2);
  EXPECT_FALSE(s.try_acquire().has_value()) << "used == new capacity: still full";
  held.pop_back();
  EXPECT_TRUE(s.try_acquire().has_value());
}

TEST(Semaphore, ShrinkBelowAWaitersWeightRejectsIt) {
  unique_key k;
  auto s = Semaphore::open(k, 4);
  auto p = s.acquire(2);
  auto f = std::async(std::launch::async, [&] { return acquire_error(s, 4); });
  ASSERT_TRUE(eventually([&] { return s.waiters() == 1; }));
  s.set_capacity(3);
  EXPECT_EQ(f.get().reason(), Reason::exceeds_capacity);
}

TEST(Semaphore, WaitIdleReturnsOnceEmptyAndDoesNotBlockAcquires) {
  unique_key k;
  auto s = Semaphore::open(k, 2);
  EXPECT_TRUE(s.wait_idle(0ms));
  auto p = s.acquire();
  EXPECT_FALSE(s.wait_idle(20ms));
  std::atomic<pid_t> tid{0};
  auto f = std::async(std::launch::async, [&] {
    tid = static_cast<pid_t>(::gettid());
    return s.wait_idle(30s);
  });
  // The releases below must find the idle wait asleep, or only its
  // already-idle path would run.
  ASSERT_TRUE(eventually([&] { return tid != 0 && asleep_in_futex(tid); }));
  auto q = s.acquire();  // not blocked by the idle wait
  q.release();
  EXPECT_EQ(f.wait_for(0s), std::future_status::timeout) << "a seat is still held";
  p.release();
  EXPECT_TRUE(f.get());
}

TEST(Semaphore, IntrospectionReadsTheCounters) {
  unique_key k;
  auto s = Semaphore::open(k, 4);
  EXPECT_TRUE(s.empty());
  EXPECT_FALSE(s.full());
  auto p = s.acquire(3);
  EXPECT_EQ(s.available(), 1);
  EXPECT_DOUBLE_EQ(s.utilization(), 0.75);
  auto q = s.acquire();
  EXPECT_TRUE(s.full());
  EXPECT_EQ(s.available(), 0);
  auto hs = s.holders();
  ASSERT_EQ(hs.size(), 2u);
  for (const auto& h : hs) {
    EXPECT_EQ(h.pid, ::getpid());
    EXPECT_EQ(h.state, HolderState::alive);
    EXPECT_FALSE(h.foreign_namespace);
  }
  EXPECT_EQ(hs[0].weight + hs[1].weight, 4);
  auto snap = s.snapshot();
  EXPECT_EQ(snap.used, 4);
  EXPECT_EQ(snap.holders.size(), 2u);
  EXPECT_EQ(snap.key, k.str());
}

TEST(Semaphore, SmoothedUtilizationRisesUnderLoadAndDecaysWhenIdle) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  EXPECT_DOUBLE_EQ(s.utilization_smoothed(), 0.0);
  auto p = s.acquire();
  ASSERT_TRUE(eventually([&] { return s.utilization_smoothed() > 0.001; }, 10s));
  const double loaded = s.utilization_smoothed();
  EXPECT_LT(loaded, 1.0);
  p.release();
  ASSERT_TRUE(eventually([&] { return s.utilization_smoothed() < loaded * 0.999; }, 10s));
}

TEST(Semaphore, StatsAndHistogramsCountEveryOutcome) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  { auto p = s.acquire(); }
  auto p = s.acquire();
  acquire_error(s, 1, {.wait_timeout = 1ms});
  auto st = s.stats();
  EXPECT_EQ(st.acquired, 2u);
  EXPECT_EQ(st.released, 1u);
  EXPECT_EQ(st.timeouts, 1u);
  EXPECT_EQ(st.wait.count(), 2u);
  EXPECT_EQ(st.hold.count(), 1u);
}

struct recording_observer : Observer {
  std::atomic<int> acquires{0}, releases{0}, wait_starts{0}, wait_ends{0}, lost{0};
  std::atomic<int> last_outcome{-1};
  void on_acquire(const AcquireEvent& e) override {
    ++acquires;
    last_outcome = static_cast<int>(e.outcome);
  }
  void on_release(const ReleaseEvent&) override { ++releases; }
  void on_wait_start(std::string_view, int) override { ++wait_starts; }
  void on_wait_end(const AcquireEvent&) override { ++wait_ends; }
  void on_lost(std::string_view, std::uint64_t, std::string_view) override { ++lost; }
};

TEST(Semaphore, ObserverSeesEveryEvent) {
  unique_key k;
  auto obs = std::make_shared<recording_observer>();
  auto s = Semaphore::open(k, 1, {.observer = obs});
  auto p = s.acquire();
  EXPECT_EQ(obs->acquires, 1);
  EXPECT_EQ(obs->last_outcome, static_cast<int>(Outcome::acquired));
  acquire_error(s, 1, {.wait_timeout = 5ms});
  EXPECT_EQ(obs->wait_starts, 1);
  EXPECT_EQ(obs->wait_ends, 1);
  EXPECT_EQ(obs->last_outcome, static_cast<int>(Outcome::timeout));
  p.release();
  EXPECT_EQ(obs->releases, 1);
  auto q = s.acquire();
  s.force_release_all();
  EXPECT_THROW(q.release(), PermitNotHeldError);
  EXPECT_EQ(obs->lost, 1);
}

// The second try_acquire() of a thread is lock-free: the observer and the
// renewal must come with the permit there too.
TEST(Semaphore, LockFreeTryAcquireKeepsObserverAndRenewal) {
  unique_key k;
  auto obs = std::make_shared<recording_observer>();
  auto s = Semaphore::open(k, 2, {.ttl = 3s, .auto_renew = true, .observer = obs});
  for (int round = 1; round <= 3; ++round) {
    SCOPED_TRACE(round);
    std::optional<Permit> p = s.try_acquire();
    ASSERT_TRUE(p.has_value());
    EXPECT_TRUE(p->is_held());
    EXPECT_TRUE(p->auto_renewing());
    EXPECT_EQ(obs->acquires, round);
    EXPECT_EQ(s.used(), 1);
    p->release();
    EXPECT_FALSE(p->auto_renewing());
    EXPECT_EQ(obs->releases, round);
    EXPECT_EQ(s.used(), 0);
  }
  // Without observer and renewal: the permit made inside the optional.
  auto plain = Semaphore::open(k, 2);
  for (int round = 0; round < 3; ++round) {
    std::optional<Permit> p = plain.try_acquire(2);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->weight(), 2);
    EXPECT_NE(p->id(), 0u);
    EXPECT_FALSE(plain.try_acquire().has_value());
    p->release();
    EXPECT_EQ(plain.used(), 0);
  }
  EXPECT_EQ(obs->releases, 3) << "the other handle's permits are not this observer's";
}

TEST(Semaphore, WithPermitReleasesEvenWhenTheWorkThrows) {
  unique_key k;
  auto s = Semaphore::open(k, 1);
  EXPECT_EQ(s.with_permit([&] { return s.used(); }), 1);
  EXPECT_EQ(s.used(), 0);
  EXPECT_THROW(s.with_permit([]() -> int { throw std::logic_error("boom"); }), std::logic_error);
  EXPECT_EQ(s.used(), 0);
  // A seat lost during the work is logged, not thrown: the work already ran.
  EXPECT_NO_THROW(s.with_permit([&](Permit&) { s.force_release_all(); }));
  EXPECT_EQ(s.used(), 0);
}

}  // namespace
}  // namespace shmsem
