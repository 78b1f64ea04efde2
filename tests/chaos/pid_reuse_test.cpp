// pid_reuse_test.cpp: a dead holder whose PID now belongs to a live,
// unrelated process is still reaped. The test gets the dead holder's PID
// for a process of its own, and keeps that one alive: as root through
// /proc/sys/kernel/ns_last_pid, otherwise by forking short-lived processes
// until the kernel hands the PID out again (pid_max is 32768 on these
// machines).
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "fault_util.hpp"
#include "seat_holder.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

long pid_max() {
  long v = 32768;
  if (FILE* f = std::fopen("/proc/sys/kernel/pid_max", "r")) {
    if (std::fscanf(f, "%ld", &v) != 1) v = 32768;
    std::fclose(f);
  }
  return v;
}

// Makes `pid` the last PID handed out in this PID namespace, so that the
// next fork gets pid + 1. Needs CAP_SYS_ADMIN; false without it.
bool set_last_pid(pid_t pid) {
  FILE* f = std::fopen("/proc/sys/kernel/ns_last_pid", "w");
  if (!f) return false;
  const bool ok = std::fprintf(f, "%d", static_cast<int>(pid)) > 0;
  return std::fclose(f) == 0 && ok;
}

// Uses up one PID, cheaply. vfork() gets a frame of its own, so that the
// caller's loop variables cannot be clobbered by it.
[[gnu::noinline]] pid_t burn_one_pid() {
  const pid_t c = ::vfork();
  if (c == 0) ::_exit(0);
  if (c > 0) {
    int st;
    ::waitpid(c, &st, 0);
  }
  return c;
}

TEST(PidReuse, DeadHolderWhosePidIsReusedIsStillReaped) {
  if (pid_max() > 65536)
    SHMSEM_SKIP_WITHOUT_CAPABILITY("pid_max is " << pid_max() << ": too large to cycle");
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  test::seat_holder holder(key.str(), 1, 1);
  const pid_t dead = holder.proc.pid();
  holder.proc.kill(SIGKILL);

  // Cycle PIDs until the next one the kernel hands out is `dead`, then
  // fork the impostor. vfork() children that exit at once make the cycling
  // cheap (no page tables to copy). The impostor never touches the
  // semaphore: it only sleeps until told to go.
  test::pipe_channel release_impostor;
  auto fork_maybe_impostor = [&]() -> pid_t {
    const pid_t f = ::fork();
    if (f == 0) {
      if (::getpid() == dead) {
        char b;
        while (::read(release_impostor.read_fd(), &b, 1) < 0 && errno == EINTR) {
        }
      }
      ::_exit(0);
    }
    return f;
  };
  pid_t impostor = -1;
  // As root, ask for the PID outright: the kernel hands out ns_last_pid + 1
  // next (what checkpoint/restore tools use). Other tests fork at the same
  // time (ctest -j2), so one of theirs may take it first: ask again.
  for (int i = 0; i < 1000 && impostor < 0 && set_last_pid(dead - 1); ++i) {
    const pid_t f = fork_maybe_impostor();
    ASSERT_GE(f, 0) << "fork failed";
    if (f == dead) {
      impostor = f;
    } else {
      int st;
      ::waitpid(f, &st, 0);
    }
  }
  // Otherwise cycle through the PIDs until the next one is `dead`.
  const long tries = 3 * pid_max();
  for (long i = 0; i < tries && impostor < 0; ++i) {
    const pid_t c = burn_one_pid();
    ASSERT_GE(c, 0) << "vfork failed";
    int st;
    if (c >= dead || dead - c > 64) continue;
    // Close below `dead` (PIDs in between may be taken): real forks now,
    // each child staying alive only if it got `dead`.
    for (int j = 0; j < 128 && impostor < 0; ++j) {
      const pid_t f = fork_maybe_impostor();
      ASSERT_GE(f, 0) << "fork failed";
      if (f == dead) {
        impostor = f;
      } else {
        ::waitpid(f, &st, 0);
        if (f > dead || f < c) break;  // went past it: someone else has it
      }
    }
  }
  if (impostor < 0)
    SHMSEM_SKIP_WITHOUT_CAPABILITY("PID " << dead << " was not handed to us again within " << tries
                                          << " forks");

  ASSERT_EQ(::kill(impostor, 0), 0) << "the impostor should be alive";
  ASSERT_EQ(sem.holders().size(), 1u);
  EXPECT_EQ(sem.holders()[0].pid, dead);
  EXPECT_EQ(sem.holders()[0].state, HolderState::dead)
      << "a live process with the holder's PID made it look alive";
  EXPECT_EQ(sem.reap(), 1);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_TRUE(sem.try_acquire().has_value());
  release_impostor.send();
  int st;
  ::waitpid(impostor, &st, 0);
}

}  // namespace
}  // namespace shmsem
