// pid_reuse_test.cpp: a dead holder whose PID now belongs to a live,
// unrelated process is still reaped. The test gets the dead holder's PID
// for a process of its own, and keeps that one alive: as root through
// /proc/sys/kernel/ns_last_pid, otherwise by forking short-lived processes
// until the kernel hands the PID out again (pid_max is 32768 on these
// machines).
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "fault_util.hpp"
#include "seat_holder.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

TEST(PidReuse, DeadHolderWhosePidIsReusedIsStillReaped) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  test::seat_holder holder(key.str(), 1, 1);
  const pid_t dead = holder.proc.pid();
  holder.proc.kill(SIGKILL);

  test::pid_impostor impostor(dead);
  if (impostor.pid() < 0)
    SHMSEM_SKIP_WITHOUT_CAPABILITY("PID " << dead << " was not handed to us again (pid_max "
                                          << test::pid_max() << ")");

  ASSERT_EQ(::kill(impostor.pid(), 0), 0) << "the impostor should be alive";
  ASSERT_EQ(sem.holders().size(), 1u);
  EXPECT_EQ(sem.holders()[0].pid, dead);
  EXPECT_EQ(sem.holders()[0].state, HolderState::dead)
      << "a live process with the holder's PID made it look alive";
  EXPECT_EQ(sem.reap(), 1);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_TRUE(sem.try_acquire().has_value());
}

}  // namespace
}  // namespace shmsem
