// bounded_ipc_test.cpp: bounded() across processes: skip under saturation
// held by another process, a SIGKILLed holder, and fail_open / fail_closed
// for a process that cannot open the segment (another user's segment, or a
// read-only /dev/shm).
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include "service_test_util.hpp"
#include "test_support.hpp"

// Designated initializers that name only some fields are the documented
// style of these options; GCC 12 warns about the fields left out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace shmsem {
namespace {

using namespace std::chrono_literals;
using test::child_process;
using test::pipe_channel;
using test::unique_key;

constexpr int kSkipped = 77;  // exit status of a child that cannot set up its premise

TEST(BoundedIpc, SkipsWhileAnotherProcessHoldsTheSeats) {
  unique_key key;
  pipe_channel to_parent, to_child;
  child_process holder([&] {
    Permit p = shmsem::acquire(key, 1);
    to_parent.send('h');
    to_child.receive();
    p.release();
    to_parent.send('r');
    to_child.receive();
    return 0;
  });
  ASSERT_EQ(to_parent.receive(), 'h');
  int runs = 0;
  auto f = bounded(
      {.key = key.str(), .permits = 1, .wait_timeout = 30ms, .on_unavailable = OnUnavailable::skip},
      [&] { ++runs; });
  EXPECT_FALSE(f());
  EXPECT_FALSE(f());
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(Semaphore::attach(key).stats().timeouts, 2u);
  to_child.send();
  ASSERT_EQ(to_parent.receive(), 'r');
  EXPECT_TRUE(f());
  EXPECT_EQ(runs, 1);
  to_child.send();
  EXPECT_EQ(holder.wait(), 0);
}

TEST(BoundedIpc, SeatOfAKilledHolderServesTheNextCall) {
  unique_key key;
  pipe_channel to_parent, to_child;
  child_process holder([&] {
    Permit p = shmsem::acquire(key, 1);
    to_parent.send('h');
    to_child.receive(std::chrono::minutes(5));
    return 0;
  });
  ASSERT_EQ(to_parent.receive(), 'h');
  auto f = bounded({.key = key.str(), .permits = 1, .wait_timeout = 20s}, [] { return 1; });
  holder.kill(SIGKILL);
  EXPECT_EQ(f(), std::optional<int>(1));
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
}

TEST(BoundedIpc, AHugeNegativeWaitTimeoutDoesNotWait) {
  unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  Permit held = sem.acquire();
  // Not while the lifeline thread that the acquire started may still be
  // starting (docs/testing.md, on fork).
  ASSERT_TRUE(test::eventually(test::other_threads_parked));
  // In a child: a wait that never ends must fail the test, not hang it.
  child_process caller([&] {
    int runs = 0;
    auto f = bounded({.key = key.str(),
                      .permits = 1,
                      .wait_timeout = -10'000'000'000'000ms,
                      .on_unavailable = OnUnavailable::skip},
                     [&] { ++runs; });
    return !f() && runs == 0 ? 0 : 1;
  });
  EXPECT_EQ(caller.wait(30s), 0);
  EXPECT_EQ(sem.stats().timeouts, 1u);
}

// Runs bounded() in every mode for `key`, which this process cannot open.
// Returns 0 when each mode behaved as documented, else a distinct code.
int check_modes_for_unopenable(const std::string& key) {
  test::log_capture log;
  int runs = 0;
  auto open_f = bounded({.key = key}, [&] { return ++runs; });
  if (open_f() != std::optional<int>(1)) return 10;
  if (open_f() != std::optional<int>(2)) return 11;
  if (log.count("fail_open") != 1) return 12;
  auto closed = bounded({.key = key, .fail_mode = FailMode::fail_closed}, [&] { return ++runs; });
  try {
    closed();
    return 13;
  } catch (const AcquisitionError& e) {
    if (e.reason() != Reason::error) return 14;
    try {
      std::rethrow_exception(e.cause());
    } catch (const SegmentError&) {
    } catch (...) {
      return 15;
    }
  }
  auto skipper = bounded(
      {.key = key, .on_unavailable = OnUnavailable::skip, .fail_mode = FailMode::fail_closed},
      [&] { return ++runs; });
  if (skipper().has_value()) return 16;
  return runs == 2 ? 0 : 17;
}

TEST(BoundedIpc, FailOpenWhenTheSegmentBelongsToAnotherUser) {
  if (::geteuid() != 0)
    SHMSEM_SKIP_WITHOUT_CAPABILITY(
        "needs root: the test creates a segment as root and opens it as nobody");
  unique_key key;
  child_process creator([&] {
    Options o;
    o.mode = 0600;
    Semaphore::open(key, 1, o);
    return 0;
  });
  ASSERT_EQ(creator.wait(), 0);
  child_process nobody([&] {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 3;
    try {
      Semaphore::open(key, 1);
      return 4;  // the premise failed: nobody could open it
    } catch (const SegmentError& e) {
      if (e.code() != std::errc::permission_denied) return 5;
    }
    return check_modes_for_unopenable(key.str());
  });
  EXPECT_EQ(nobody.wait(), 0);
  EXPECT_EQ(Semaphore::attach(key).stats().acquired, 0u);
}

TEST(BoundedIpc, FailOpenWhenDevShmIsReadOnly) {
  SHMSEM_SHM_ONLY();  // /dev/shm is shared memory's store
  unique_key key;
  child_process child([&] {
    // A private mount namespace with an empty read-only tmpfs on /dev/shm.
    if (::unshare(CLONE_NEWNS) != 0) return kSkipped;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return kSkipped;
    if (::mount("tmpfs", "/dev/shm", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
      return kSkipped;
    try {
      Semaphore::open(key, 1);
      return 4;
    } catch (const SegmentError&) {
    }
    return check_modes_for_unopenable(key.str());
  });
  const int rc = child.wait();
  if (rc == kSkipped)
    SHMSEM_SKIP_WITHOUT_CAPABILITY("cannot make a mount namespace here (needs CAP_SYS_ADMIN)");
  EXPECT_EQ(rc, 0);
  EXPECT_THROW(Semaphore::attach(key), SegmentError);  // nothing leaked to the real /dev/shm
}

}  // namespace
}  // namespace shmsem
