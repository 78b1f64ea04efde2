// `shmsem run` holds its seat for COMMAND's whole process tree, as flock(1)
// holds its lock: COMMAND inherits a descriptor of the wrapper's liveness
// token. Killing the wrapper with SIGKILL, or COMMAND exiting, leaves the
// seat held while a process it started still runs; the seat comes back
// promptly when that process exits. --close-token opts out.
#include "test_support.hpp"
#include "tool_runner.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

namespace {

using namespace std::chrono_literals;
using shmsem::Semaphore;
using shmsem::test::eventually;
using shmsem::test::run_args;
using shmsem::test::run_tool;
using shmsem::test::running_tool;
using shmsem::test::tool_result;
using shmsem::test::unique_key;

// Gone, or a zombie (whose descriptors are closed already).
bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto close = line.rfind(')');
  return close != std::string::npos && line.size() > close + 2 && line[close + 2] == 'Z';
}

// A second `shmsem run -w 1s` gets no seat; after `release()` (which ends
// the process that keeps it), a second run gets it within a few seconds.
void expect_seat_kept_until(const unique_key& key, const std::function<void()>& release) {
  tool_result r = run_tool(run_args(key, {"-w", "1s"}, {"echo", "hi"}));
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_EQ(r.out, "") << "a second command ran while the first one's tree still runs";
  r = run_tool({SHMSEM_BIN, "reap", key.str()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("reaped 0 seats"), std::string::npos) << r.out;
  release();
  const auto start = std::chrono::steady_clock::now();
  r = run_tool(run_args(key, {"-w", "20s"}, {"echo", "hi"}));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "hi\n");
  // About 20 ms (the waiter's check for dead holders) plus process start-up;
  // generous for loaded machines.
  EXPECT_LT(took, 5s);
}

TEST(RunToken, KilledRunKeepsTheSeatUntilItsGrandchildExits) {
  unique_key key;
  // run -> sh -> sleep: the grandchild tells its pid through the pipe.
  running_tool run(
      run_args(key, {"-p", "1"}, {"sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!; wait"}));
  const pid_t grandchild = std::stoi(run.read_line());
  ASSERT_GT(grandchild, 0);
  run.kill(SIGKILL);
  EXPECT_EQ(run.wait(), 128 + SIGKILL);
  // sh dies with the wrapper (parent-death signal); its child runs on.
  EXPECT_FALSE(gone(grandchild));
  const auto snap = Semaphore::inspect(key);
  ASSERT_EQ(snap.holders.size(), 1u);
  EXPECT_EQ(snap.holders[0].state, shmsem::HolderState::alive);
  const auto users = Semaphore::users(key);
  bool named = false;
  for (const auto& u : users)
    named |= u.pid == grandchild && u.seats == 1 && u.holder_pid == run.pid();
  EXPECT_TRUE(named) << "users() does not name the grandchild as the seat's keeper";
  expect_seat_kept_until(key, [&] {
    ASSERT_EQ(::kill(grandchild, SIGKILL), 0);
    ASSERT_TRUE(eventually([&] { return gone(grandchild); }, 30s));
  });
}

TEST(RunToken, ACommandThatExitsLeavesTheSeatToTheProcessItStarted) {
  unique_key key;
  // The background child is a copy of sh until it has exec'd sleep: the
  // command waits for that, so that the wrapper finds it by its name.
  running_tool run(run_args(key, {"-p", "1"},
                            {"sh", "-c",
                             "sleep 600 >/dev/null 2>&1 & while kill -0 $! && [ \"$(cat "
                             "/proc/$!/comm)\" != sleep ]; do :; done; "
                             "echo $!"}));
  const pid_t background = std::stoi(run.read_line());
  EXPECT_EQ(run.wait(), 0);
  EXPECT_NE(run.stderr_text().find("pid " + std::to_string(background) + " (sleep)"),
            std::string::npos)
      << run.stderr_text();
  expect_seat_kept_until(key, [&] {
    ASSERT_EQ(::kill(background, SIGKILL), 0);
    ASSERT_TRUE(eventually([&] { return gone(background); }, 30s));
  });
  EXPECT_EQ(Semaphore::inspect(key).stats.reaped, 1u);
}

TEST(RunToken, CloseTokenLetsTheSeatGoWithTheWrapper) {
  unique_key key;
  running_tool run(run_args(key, {"-p", "1", "--close-token"},
                            {"sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!; wait"}));
  const pid_t grandchild = std::stoi(run.read_line());
  run.kill(SIGKILL);
  EXPECT_EQ(run.wait(), 128 + SIGKILL);
  const tool_result r = run_tool(run_args(key, {"-w", "20s"}, {"echo", "hi"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "hi\n");
  ::kill(grandchild, SIGKILL);
}

TEST(RunToken, CommandIsToldWhichDescriptorHoldsTheSeat) {
  unique_key key;
  tool_result r = run_tool(
      run_args(key, {"-p", "1"}, {"sh", "-c", "readlink /proc/$$/fd/$SHMSEM_RUN_TOKEN_FD"}));
  EXPECT_EQ(r.status, 0) << r.err;
  // The seat is held by its token, in one of the token files beside the segment.
  EXPECT_EQ(r.out.rfind("/dev/shm/shmsem-tokens.", 0), 0u) << r.out;
  r = run_tool(
      run_args(key, {"--close-token"}, {"sh", "-c", "echo \"[${SHMSEM_RUN_TOKEN_FD-unset}]\""}));
  EXPECT_EQ(r.out, "[unset]\n");
  EXPECT_EQ(Semaphore::inspect(key).used, 0);
}

}  // namespace
