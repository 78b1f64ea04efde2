// permissions_test.cpp: segments and users. A 0600 segment is refused to
// another user; 0660 with a shared group works across users, including
// reaping a killed holder of another user; and a live holder owned by
// another user is never judged dead (liveness does not come from kill(),
// whose EPERM would otherwise look like an error); a prefork worker that
// drops its privileges after the fork holds seats of its own, and so does
// one forked after its parent dropped them. Children drop
// to unprivileged uids with setgid/setuid after fork.
#include <shmsem/shmsem.hpp>

#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fault_util.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;

constexpr gid_t kSharedGroup = 64999;

// Becomes `uid`, with `gid` as primary group and the supplementary groups given.
bool become(uid_t uid, gid_t gid, std::vector<gid_t> groups = {}) {
  return ::setgroups(groups.size(), groups.data()) == 0 && ::setgid(gid) == 0 &&
         ::setuid(uid) == 0 && ::geteuid() == uid;
}

class Permissions : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) SHMSEM_SKIP_WITHOUT_CAPABILITY("needs root to switch users");
  }
};

TEST_F(Permissions, Segment0600IsRefusedToAnotherUser) {
  test::unique_key key;
  // Created by another process: a child forked from one that has the
  // segment open would inherit the open file, whatever its uid.
  test::child_process creator([&] {
    Options o;
    o.mode = 0600;
    Semaphore::open(key, 1, o);
    return 0;
  });
  ASSERT_EQ(creator.wait(), 0);
  struct stat st;
  ASSERT_EQ(::stat(Semaphore::segment_path(key).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  test::child_process nobody([&] {
    if (!become(65534, 65534)) return 10;
    for (int i = 0; i < 3; ++i) {
      try {
        if (i == 0) Semaphore::open(key, 1);
        if (i == 1) Semaphore::attach(key);
        if (i == 2) Semaphore::remove(key);
        ADD_FAILURE() << "call " << i << " succeeded for another user";
      } catch (const SegmentError& e) {
        EXPECT_EQ(e.code(), errc::permission_denied) << e.what();
        EXPECT_EQ(e.code(), std::errc::permission_denied);
      }
    }
    return 0;
  });
  EXPECT_EQ(nobody.wait(), 0);
  EXPECT_TRUE(Semaphore::attach(key).acquire().is_held());  // untouched
}

TEST_F(Permissions, Segment0660IsSharedByTheGroupAndReapedAcrossUsers) {
  test::unique_key key;
  test::pipe_channel created, held, done;
  // User 64001 creates the semaphore, in the shared group, mode 0660.
  test::child_process owner([&] {
    if (!become(64001, kSharedGroup)) return 10;
    Options o;
    o.mode = 0660;
    Semaphore sem = Semaphore::open(key, 1, o);
    created.send();
    EXPECT_EQ(held.receive(), 'h');
    // The other user's holder lives: its seat is not free, and not reaped.
    EXPECT_FALSE(sem.try_acquire().has_value());
    EXPECT_EQ(sem.reap(), 0);
    EXPECT_EQ(sem.holders().size(), 1u);
    if (!sem.holders().empty()) {
      EXPECT_EQ(sem.holders()[0].state, HolderState::alive);
    }
    done.send('c');
    // Then it is killed (by the parent): its seat comes to us.
    Permit p = sem.acquire(1, {.wait_timeout = 10s});
    return p.is_held() ? 0 : 1;
  });
  ASSERT_EQ(created.receive(), '.');
  struct stat st;
  ASSERT_EQ(::stat(Semaphore::segment_path(key).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, kSharedGroup);
  // User 64002, a member of the group through a supplementary group.
  test::child_process member([&] {
    if (!become(64002, 64002, {kSharedGroup})) return 10;
    Permit p = Semaphore::attach(key).acquire();
    held.send('h');
    ::pause();
    return 0;
  });
  EXPECT_EQ(done.receive(), 'c');
  member.kill(SIGKILL);
  EXPECT_EQ(owner.wait(), 0);
  // A user outside the group is refused.
  test::child_process outsider([&] {
    if (!become(64003, 64003)) return 10;
    try {
      Semaphore::attach(key);
    } catch (const SegmentError& e) {
      return e.code() == errc::permission_denied ? 0 : 2;
    }
    return 1;
  });
  EXPECT_EQ(outsider.wait(), 0);
}

TEST_F(Permissions, LiveHolderOfAnotherUserIsNotTreatedAsDead) {
  test::unique_key key;
  Options o;
  o.mode = 0666;
  Semaphore sem = Semaphore::open(key, 1, o);
  test::pipe_channel held;
  test::child_process other([&] {
    if (!become(64004, 64004)) return 10;
    Permit p = Semaphore::attach(key).acquire();
    held.send('h');
    ::pause();
    return 0;
  });
  ASSERT_EQ(held.receive(), 'h');
  // The reaper runs as yet another unprivileged user: kill(pid, 0) would
  // fail with EPERM for it.
  test::child_process reaper([&] {
    if (!become(64005, 64005)) return 10;
    Semaphore s = Semaphore::attach(key);
    if (s.reap() != 0) return 1;
    if (s.try_acquire().has_value()) return 2;
    if (s.holders().size() != 1 || s.holders()[0].state != HolderState::alive) return 3;
    return 0;
  });
  EXPECT_EQ(reaper.wait(), 0);
  EXPECT_EQ(sem.used(), 1);
  other.kill(SIGKILL);
  EXPECT_EQ(sem.reap(), 1);
}

// Who drops the privileges: the worker after the fork, or its parent
// before it.
enum class drop { in_the_worker, in_the_parent };

// A root process opens a 0600 semaphore of 2 seats and takes one, which
// makes token file 0 root's, then forks a worker that takes the other seat
// as `uid`. The worker's token must be its own, its death must show, and
// neither may judge the other dead. The exit code: 0, or what failed (see
// kWhatFailed).
int a_worker_of_another_user_holds_its_own_seat(const test::unique_key& key, drop where,
                                                uid_t uid) {
  test::pipe_channel held;
  test::child_process parent([&] {
    Options o;
    o.mode = 0600;
    Semaphore sem = Semaphore::open(key, 2, o);
    Permit mine = sem.acquire();
    if (where == drop::in_the_parent && !become(uid, uid)) return 10;
    if (!test::eventually(test::other_threads_parked)) return 2;
    test::child_process worker([&] {
      if (where == drop::in_the_worker && !become(uid, uid)) return 10;
      // Whether or not it can read the parent's token, the parent lives.
      if (sem.reap() != 0) return 3;
      Permit p = sem.acquire(1, {.wait_timeout = 10s});
      held.send('h');
      ::pause();
      return 0;
    });
    if (held.receive() != 'h') return 4;
    if (sem.used() != 2 || sem.reap() != 0) return 5;
    worker.kill(SIGKILL);
    (void)worker.wait();
    if (!sem.acquire(1, {.wait_timeout = 10s}).is_held()) return 6;
    return mine.is_held() ? 0 : 7;
  });
  return parent.wait();
}

constexpr const char* kWhatFailed =
    "2: threads never parked; 3: the worker reaped its live parent; 4: the worker got no seat; "
    "5: the worker was reaped alive; 6: its seat did not come back; 7: the parent lost its "
    "seat; 10: could not switch users";

// A prefork server: the master opens the semaphore as root, and each
// worker drops to an unprivileged user after the fork, then takes its
// seats through the handle it inherited.
TEST_F(Permissions, AWorkerThatDropsPrivilegesAfterForkHoldsItsOwnSeat) {
  test::unique_key key;
  EXPECT_EQ(a_worker_of_another_user_holds_its_own_seat(key, drop::in_the_worker, 64006), 0)
      << kWhatFailed;
}

// The other order: the parent drops its privileges first and forks after.
// Its child cannot open the token file its parent made as root: it must
// not take a seat without a token of its own, nor judge the parent dead.
// It takes its token in a token file of its own.
TEST_F(Permissions, AChildForkedAfterItsParentDroppedPrivilegesHoldsItsOwnToken) {
  test::unique_key key;
  EXPECT_EQ(a_worker_of_another_user_holds_its_own_seat(key, drop::in_the_parent, 64007), 0)
      << kWhatFailed;
}

}  // namespace
}  // namespace shmsem
