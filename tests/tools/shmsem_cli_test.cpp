// The shmsem command-line tool, run as a real process against real
// segments: run (status passthrough, conflicts, --skip, signals, SIGKILL,
// the bound under many concurrent shells, lost seats), the inspection
// commands and every admin command, gc racing an attach included.
#include "seat_holder.hpp"
#include "shm/segment.hpp"
#include "test_support.hpp"
#include "tool_runner.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using shmsem::Semaphore;
using shmsem::test::asleep_in_futex;
using shmsem::test::child_process;
using shmsem::test::eventually;
using shmsem::test::pipe_channel;
using shmsem::test::run_args;
using shmsem::test::run_tool;
using shmsem::test::running_tool;
using shmsem::test::seat_holder;
using shmsem::test::shmsem_cli;
using shmsem::test::tool_result;
using shmsem::test::unique_key;
using shmsem::test::write_junk_segment;

// A scratch directory removed with its contents at the end of the test.
struct scratch_dir {
  std::string path;
  scratch_dir() {
    char tmpl[] = "/tmp/shmsem-cli-test.XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~scratch_dir() { run_tool({"rm", "-rf", path}); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

bool exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

// A test that needs /usr/bin/NAME (from the Debian package of that name):
// a failure on CI, a skip elsewhere.
#define REQUIRE_PROGRAM(name)                                                                      \
  if (::access("/usr/bin/" name, X_OK) != 0) {                                                     \
    const char* ci = std::getenv("CI");                                                            \
    if (ci && std::string(ci) == "true")                                                           \
      FAIL() << name " is missing (scripts/deps.sh installs it)";                                  \
    GTEST_SKIP() << name " is not installed (apt-get install " name "); on CI this fails instead"; \
  }
// The tests that look at a tool's system calls.
#define REQUIRE_STRACE() REQUIRE_PROGRAM("strace")

// Under a sanitizer (the tools are built with the same flags as the tests)
// the witness is always forked, and valgrind cannot run the program.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SKIP_UNDER_SANITIZER() GTEST_SKIP() << "not under a sanitizer"
#else
#define SKIP_UNDER_SANITIZER() (void)0
#endif

// ------------------------------------------------------------------ run

TEST(ShmsemRun, ExitsWithTheCommandsStatusAndReleasesTheSeat) {
  unique_key key;
  const auto r = run_tool(run_args(key, {"-p", "2"}, {"sh", "-c", "exit 7"}));
  EXPECT_EQ(r.status, 7) << r.err;
  auto sem = Semaphore::attach(key);
  EXPECT_EQ(sem.capacity(), 2);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_EQ(sem.stats().acquired, 1u);
  EXPECT_EQ(sem.stats().released, 1u);
}

TEST(ShmsemRun, ReportsACommandKilledBySignalAs128PlusSignal) {
  unique_key key;
  const auto r = run_tool(run_args(key, {"-p", "1"}, {"sh", "-c", "kill -USR1 $$"}));
  EXPECT_EQ(r.status, 128 + SIGUSR1) << r.err;
}

TEST(ShmsemRun, HoldsTheSeatsWhileTheCommandRuns) {
  unique_key key;
  running_tool t(run_args(key, {"-p", "3", "-n", "2"}, {"sh", "-c", "echo ready; read x; exit 0"}));
  ASSERT_EQ(t.read_line(), "ready");
  auto sem = Semaphore::attach(key);
  EXPECT_EQ(sem.used(), 2);
  const auto holders = sem.holders();
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(holders[0].pid, t.pid());
  EXPECT_EQ(holders[0].weight, 2);
  t.close_stdin();
  EXPECT_EQ(t.wait(), 0);
  EXPECT_EQ(sem.used(), 0);
}

// One process as /proc/<pid>/stat shows it.
struct process_row {
  pid_t pid = 0;
  std::string comm;
  char state = 0;
  pid_t ppid = 0;
};

// Calls each(row) for every process of /proc.
template <class Each>
void for_each_process(Each&& each) {
  DIR* proc = ::opendir("/proc");
  if (!proc) return;
  while (const dirent* e = ::readdir(proc)) {
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    // The command name may hold spaces and parentheses: it ends at the last ')'.
    const auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    process_row row;
    row.pid = std::atoi(e->d_name);
    row.comm = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 2));
    rest >> row.state >> row.ppid;
    each(row);
  }
  ::closedir(proc);
}

// The children of `parent` that are zombies (exited, not yet reaped).
int zombie_children(pid_t parent) {
  int n = 0;
  for_each_process([&](const process_row& p) { n += p.ppid == parent && p.state == 'Z'; });
  return n;
}

// shmsem run is the subreaper of COMMAND's tree: a process orphaned while
// COMMAND runs becomes its child, and must not stay a zombie.
TEST(ShmsemRun, ReapsTheOrphansItAdoptsWhileTheCommandRuns) {
  unique_key key;
  running_tool t(
      run_args(key, {"-p", "1"}, {"sh", "-c", "sh -c 'true &'; echo ready; read x; exit 0"}));
  ASSERT_EQ(t.read_line(), "ready");
  // The orphaned `true` was adopted: it shows as a zombie child of the
  // wrapper until the wrapper's once-a-second check reaps it.
  EXPECT_TRUE(eventually([&] { return zombie_children(t.pid()) == 0; }, 10s));
  t.close_stdin();
  EXPECT_EQ(t.wait(), 0);
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
}

TEST(ShmsemRun, ExitsWithTheConflictCodeAndDoesNotRunWhenNoSeatIsFree) {
  unique_key key;
  scratch_dir dir;
  auto sem = Semaphore::open(key, 1);
  auto p = sem.acquire();
  const std::string marker = dir / "ran";
  auto r = run_tool(run_args(key, {"--nonblock"}, {"touch", marker}));
  EXPECT_EQ(r.status, 1);
  r = run_tool(run_args(key, {"--nonblock", "-E", "75"}, {"touch", marker}));
  EXPECT_EQ(r.status, 75);
  r = run_tool(run_args(key, {"-w", "200ms", "-E", "9"}, {"touch", marker}));
  EXPECT_EQ(r.status, 9);
  EXPECT_FALSE(exists(marker));
  EXPECT_EQ(sem.stats().timeouts, 1u);
  p.release();
  r = run_tool(run_args(key, {"--nonblock"}, {"touch", marker}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(exists(marker));
}

TEST(ShmsemRun, SkipExitsZeroWithoutRunning) {
  unique_key key;
  scratch_dir dir;
  auto sem = Semaphore::open(key, 1);
  auto p = sem.acquire();
  const auto r = run_tool(run_args(key, {"--nonblock", "--skip"}, {"touch", dir / "ran"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(exists(dir / "ran"));
}

TEST(ShmsemRun, VerboseSaysWhyItSkippedAndQuietSkipSaysNothing) {
  unique_key key;
  scratch_dir dir;
  auto sem = Semaphore::open(key, 1);
  auto p = sem.acquire();
  auto r = run_tool(run_args(key, {"--nonblock", "--skip", "-v"}, {"touch", dir / "ran"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(key.str() + ": no seat free; skipped COMMAND"), std::string::npos) << r.err;
  r = run_tool(run_args(key, {"-w", "100ms", "--skip", "-v"}, {"touch", dir / "ran"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(key.str() + ": timed out after 100ms waiting for 1 seat; skipped COMMAND"),
            std::string::npos)
      << r.err;
  // What cron wants: without -v, not a word.
  r = run_tool(run_args(key, {"--nonblock", "--skip"}, {"touch", dir / "ran"}));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(exists(dir / "ran"));
}

TEST(ShmsemRun, VerboseSaysTheWaitTimedOut) {
  unique_key key;
  auto sem = Semaphore::open(key, 1);
  auto p = sem.acquire();
  const auto r = run_tool(run_args(key, {"-w", "0.1", "-v"}, {"true"}));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(key.str() + ": timed out after 100ms waiting for 1 seat"), std::string::npos)
      << r.err;
}

TEST(ShmsemRun, AWeightAboveTheCapacityIsAUsageErrorThatSaysSo) {
  unique_key key;
  scratch_dir dir;
  auto sem = Semaphore::open(key, 1);
  const std::vector<std::vector<std::string>> ways = {
      {}, {"--nonblock"}, {"-w", "1s"}, {"--nonblock", "--skip"}, {"-p", "1"}, {"-p", "4"}};
  for (auto extra : ways) {
    extra.insert(extra.end(), {"-n", "3"});
    const auto r = run_tool(run_args(key, extra, {"touch", dir / "ran"}), 20s);
    EXPECT_EQ(r.status, 2) << extra.front();
    EXPECT_NE(r.err.find("-n 3"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("capacity of " + key.str() + " is 1"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(exists(dir / "ran"));
  // A new key created with too small a capacity: the same.
  unique_key fresh;
  const auto r = run_tool(run_args(fresh, {"-p", "2", "-n", "3"}, {"true"}));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("capacity of " + fresh.str() + " is 2"), std::string::npos) << r.err;
}

TEST(ShmsemRun, PermitsBeyondAnExistingCapacityAreMentionedOnlyWithVerbose) {
  unique_key key;
  auto sem = Semaphore::open(key, 1);
  auto r = run_tool(run_args(key, {"-p", "4"}, {"true"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");  // cron mails every byte of stderr
  r = run_tool(run_args(key, {"-p", "4", "-v"}, {"true"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(key.str() +
                       ": exists with capacity 1; -p 4 does not change it (shmsem "
                       "resize " +
                       key.str() + " 4)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("set_capacity"), std::string::npos) << r.err;
  EXPECT_EQ(sem.capacity(), 1);
}

TEST(ShmsemRun, RefusesAMissingKeyWithoutPermits) {
  unique_key key;
  const auto r = run_tool(run_args(key, {}, {"true"}));
  EXPECT_EQ(r.status, 3) << r.err;
}

TEST(ShmsemRun, MissingCommandExits127) {
  unique_key key;
  const auto r = run_tool(run_args(key, {"-p", "1"}, {"/nonexistent/shmsem-no-such-command"}));
  EXPECT_EQ(r.status, 127);
  EXPECT_NE(r.err.find("shmsem-no-such-command"), std::string::npos) << r.err;
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
}

class ShmsemRunSignals : public ::testing::TestWithParam<int> {};

TEST_P(ShmsemRunSignals, ForwardsTheSignalToTheCommand) {
  const int sig = GetParam();
  unique_key key;
  const std::string name = sig == SIGINT ? "INT" : sig == SIGTERM ? "TERM" : "HUP";
  // The trap proves the command got the signal; exit 42 proves its status
  // came back through shmsem run.
  running_tool t(run_args(key, {"-p", "1"},
                          {"sh", "-c",
                           "trap 'echo got " + name + "; exit 42' " + name +
                               "; echo ready; while :; do sleep 0.05; done"}));
  ASSERT_EQ(t.read_line(), "ready");
  t.kill(sig);
  EXPECT_EQ(t.read_line(), "got " + name);
  EXPECT_EQ(t.wait(), 42) << t.stderr_text();
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
}

INSTANTIATE_TEST_SUITE_P(Signals, ShmsemRunSignals, ::testing::Values(SIGINT, SIGTERM, SIGHUP));

// After the first SIGTERM arrived (read here unless `read_first` is false):
// waits long enough for a second one (the wrapper decides within about
// 0.2 s whether to pass a signal on), then lets the command finish and
// returns its count.
std::string total_terms(running_tool& t, const std::string& stop, bool read_first = true) {
  if (read_first) {
    EXPECT_EQ(t.read_line(), "TERM 1");
  }
  // A negative check: no second TERM may come, and nothing marks the
  // wrapper's decision, so this outwaits its window several times over.
  std::this_thread::sleep_for(1500ms);
  std::ofstream{stop};
  std::string line;
  do line = t.read_line();
  while (line.rfind("TERM ", 0) == 0);
  return line;
}

// Processes whose process group is `pgid`, read from /proc.
std::vector<pid_t> process_group(pid_t pgid) {
  std::vector<pid_t> out;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      const pid_t pid = std::atoi(e->d_name);
      if (pid <= 0) continue;
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string text;
      if (!std::getline(stat, text)) continue;
      const auto close = text.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream fields(text.substr(close + 2));
      std::string state;
      long ppid = 0, pgrp = 0;
      if (fields >> state >> ppid >> pgrp && pgrp == pgid && state != "Z") out.push_back(pid);
    }
    ::closedir(d);
  }
  return out;
}

char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');
  return close != std::string::npos && text.size() > close + 2 ? text[close + 2] : '?';
}

// Ctrl-C, `kill -- -PGID`, timeout(1) and a shell's `kill 0` reach the
// whole process group, COMMAND included: the wrapper must not send the
// same signal again. The wrapper is stopped while the signal lands, as a
// loaded host may keep it off the CPU, so that COMMAND has surely handled
// the signal before the wrapper sees its own copy.
TEST(ShmsemRunSignalRule, ASignalToTheProcessGroupReachesTheCommandOnce) {
  unique_key key;
  scratch_dir dir;
  running_tool t(run_args(key, {"-p", "1"}, {SIGNAL_COUNTER_BIN, dir / "stop"}));
  ASSERT_EQ(t.read_line(), "ready");
  ASSERT_EQ(::kill(t.pid(), SIGSTOP), 0);
  ASSERT_TRUE(eventually([&] { return process_state(t.pid()) == 'T'; }));
  ASSERT_EQ(::kill(-t.pid(), SIGTERM), 0);  // running_tool made it a group leader
  EXPECT_EQ(t.read_line(), "TERM 1");
  ASSERT_EQ(::kill(t.pid(), SIGCONT), 0);
  EXPECT_EQ(total_terms(t, dir / "stop", false), "total 1");
  EXPECT_EQ(t.wait(), 0) << t.stderr_text();
}

TEST(ShmsemRunSignalRule, ASignalToTheWrapperAloneIsPassedOnOnce) {
  unique_key key;
  scratch_dir dir;
  running_tool t(run_args(key, {"-p", "1"}, {SIGNAL_COUNTER_BIN, dir / "stop"}));
  ASSERT_EQ(t.read_line(), "ready");
  t.kill(SIGTERM);
  EXPECT_EQ(total_terms(t, dir / "stop"), "total 1");
  EXPECT_EQ(t.wait(), 0) << t.stderr_text();
}

// systemd's KillMode=control-group signals every process of the unit one
// by one, the main process (the wrapper) first.
TEST(ShmsemRunSignalRule, ASignalToEachProcessInTurnReachesTheCommandOnce) {
  unique_key key;
  scratch_dir dir;
  running_tool t(run_args(key, {"-p", "1"}, {SIGNAL_COUNTER_BIN, dir / "stop"}));
  ASSERT_EQ(t.read_line(), "ready");
  std::vector<pid_t> group = process_group(t.pid());
  ASSERT_GE(group.size(), 2u);
  std::stable_partition(group.begin(), group.end(), [&](pid_t p) { return p == t.pid(); });
  for (pid_t p : group) ::kill(p, SIGTERM);
  EXPECT_EQ(total_terms(t, dir / "stop"), "total 1");
  EXPECT_EQ(t.wait(), 0) << t.stderr_text();
}

// timeout(1) signals its child (the wrapper) and then its whole group.
TEST(ShmsemRunSignalRule, UnderTimeoutTheCommandGetsOneSigterm) {
  unique_key key;
  scratch_dir dir;
  std::vector<std::string> argv = {"timeout", "-s", "TERM", "3"};
  for (auto& a : run_args(key, {"-p", "1"}, {SIGNAL_COUNTER_BIN, dir / "stop"})) argv.push_back(a);
  running_tool t(argv);
  ASSERT_EQ(t.read_line(), "ready");
  EXPECT_EQ(total_terms(t, dir / "stop"), "total 1");
  EXPECT_EQ(t.wait(), 124) << t.stderr_text();
}

std::uint64_t ignored_signals(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string l; std::getline(in, l);)
    if (l.rfind("SigIgn:", 0) == 0) return std::stoull(l.substr(7), nullptr, 16);
  ADD_FAILURE() << "no SigIgn for " << pid;
  return 0;
}

bool ignores(pid_t pid, int sig) {
  return (ignored_signals(pid) >> (sig - 1)) & 1;
}

// nohup(1) sets SIGHUP to SIG_IGN: the wrapper must neither catch it nor
// give the command a default action for it, as flock(1) does not.
TEST(ShmsemRun, UnderNohupTheWrapperAndTheCommandIgnoreSighup) {
  unique_key key;
  scratch_dir dir;
  std::vector<std::string> argv = {"nohup"};
  for (auto& a :
       run_args(key, {"-p", "1"},
                {"sh", "-c", "echo $$; while [ ! -e \"$1\" ]; do sleep 0.05; done; echo alive",
                 "sh", dir / "stop"}))
    argv.push_back(a);
  running_tool t(argv);
  const pid_t command = std::stoi(t.read_line());
  EXPECT_TRUE(ignores(t.pid(), SIGHUP)) << "the wrapper catches SIGHUP";
  EXPECT_TRUE(ignores(command, SIGHUP)) << "the command lost nohup's SIG_IGN";
  ::kill(t.pid(), SIGHUP);
  ::kill(-t.pid(), SIGHUP);
  std::ofstream{dir / "stop"};
  EXPECT_EQ(t.read_line(), "alive");
  EXPECT_EQ(t.wait(), 0) << t.stderr_text();
}

TEST(ShmsemRun, SignalsIgnoredAtStartStayIgnoredInTheCommand) {
  unique_key key;
  scratch_dir dir;
  std::vector<std::string> argv = {"sh", "-c", "trap '' INT TERM; exec \"$@\"", "sh"};
  for (auto& a : run_args(
           key, {"-p", "1"},
           {"sh", "-c", "echo $$; while [ ! -e \"$1\" ]; do sleep 0.05; done", "sh", dir / "stop"}))
    argv.push_back(a);
  running_tool t(argv);
  const pid_t command = std::stoi(t.read_line());
  EXPECT_TRUE(ignores(command, SIGINT));
  EXPECT_TRUE(ignores(command, SIGTERM));
  EXPECT_FALSE(ignores(command, SIGHUP));
  std::ofstream{dir / "stop"};
  EXPECT_EQ(t.wait(), 0) << t.stderr_text();
}

TEST(ShmsemRun, SeatOfAKilledRunIsReclaimedAndItsCommandDies) {
  unique_key key;
  running_tool t(run_args(key, {"-p", "1"}, {"sh", "-c", "echo $$; exec sleep 600"}));
  const pid_t command = std::stoi(t.read_line());
  auto sem = Semaphore::attach(key);
  ASSERT_EQ(sem.used(), 1);
  EXPECT_FALSE(sem.try_acquire().has_value());
  t.kill(SIGKILL);
  EXPECT_EQ(t.wait(), 128 + SIGKILL);
  std::optional<shmsem::Permit> p;
  EXPECT_TRUE(eventually([&] { return (p = sem.try_acquire()).has_value(); }, 30s));
  EXPECT_GE(sem.stats().reaped, 1u);
  // The command must not run on without a seat.
  EXPECT_TRUE(eventually([&] {
    std::ifstream stat("/proc/" + std::to_string(command) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const auto close = line.rfind(')');
    return close != std::string::npos && line.size() > close + 2 && line[close + 2] == 'Z';
  }));
}

// The children of `parent` whose command name is `comm`.
std::vector<pid_t> children_named(pid_t parent, const std::string& comm) {
  std::vector<pid_t> found;
  for_each_process([&](const process_row& p) {
    if (p.ppid == parent && p.comm == comm) found.push_back(p.pid);
  });
  return found;
}

// What each open descriptor of `pid` refers to, by number ("" if `pid` is
// gone).
std::string descriptors_of(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  std::vector<int> fds;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') fds.push_back(std::atoi(e->d_name));
    ::closedir(d);
  }
  std::sort(fds.begin(), fds.end());
  std::string text;
  for (int fd : fds) {
    char target[256] = {};
    const ssize_t n =
        ::readlink((dir + "/" + std::to_string(fd)).c_str(), target, sizeof target - 1);
    std::string what = n > 0 ? std::string(target, n) : "?";
    if (what.rfind("pipe:", 0) == 0) what = "pipe";
    text += std::to_string(fd) + "=" + what + " ";
  }
  return text;
}

// The signal witness shares the wrapper's process group but must hold
// nothing of the wrapper's: not the seat's descriptors (it would keep the
// seat), not the caller's terminal or pipes (a reader would never see
// end-of-file). And it must not outlive a SIGKILLed wrapper.
TEST(ShmsemRun, TheWitnessHoldsOnlyItsReportPipeAndDiesWithTheWrapper) {
  unique_key key;
  running_tool t(run_args(key, {"-p", "1"}, {"sh", "-c", "echo ready; exec sleep 600"}));
  ASSERT_EQ(t.read_line(), "ready");
  // The witness names itself once it runs, which on a busy host can be
  // after the command has started.
  std::vector<pid_t> witnesses;
  EXPECT_TRUE(eventually([&] {
    witnesses = children_named(t.pid(), "shmsem-witness");
    return witnesses.size() == 1;
  }));
  ASSERT_EQ(witnesses.size(), 1u);
  const pid_t witness = witnesses[0];
  const std::string only = "0=/dev/null 1=/dev/null 2=/dev/null 3=pipe ";
  EXPECT_TRUE(eventually([&] { return descriptors_of(witness) == only; }, 10s))
      << descriptors_of(witness);
  t.kill(SIGKILL);
  EXPECT_EQ(t.wait(), 128 + SIGKILL);
  // Gone, a zombie, or its pid already reused by another program.
  EXPECT_TRUE(eventually([&] {
    std::ifstream stat("/proc/" + std::to_string(witness) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const auto close = line.rfind(')');
    return close == std::string::npos || line.find("(shmsem-witness)") == std::string::npos ||
           (line.size() > close + 2 && line[close + 2] == 'Z');
  }));
}

// Valgrind runs only the clone() of a thread, fork and vfork, and stops a
// program that asks for any other: a script checked under it must still
// get through `shmsem run`.
TEST(ShmsemRun, RunsUnderValgrind) {
  REQUIRE_PROGRAM("valgrind");
  SKIP_UNDER_SANITIZER();
  unique_key key;
  auto args = run_args(key, {"-p", "1"}, {"sh", "-c", "exit 3"});
  args.insert(args.begin(), {"/usr/bin/valgrind", "-q", "--tool=none"});
  const tool_result r = run_tool(args);
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
}

// Where the kernel or an emulator refuses the clone() that shares the
// wrapper's memory, the witness is forked instead: signals are still told
// apart. strace makes the first clone() fail, which is the witness's.
TEST(ShmsemRun, TheWitnessIsForkedWhenItsCloneIsRefused) {
  REQUIRE_STRACE();
  SKIP_UNDER_SANITIZER();
  unique_key key;
  auto args = run_args(key, {"-p", "1"}, {"sh", "-c", "echo $PPID; read x; exit 0"});
  args.insert(args.begin(), {"/usr/bin/strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=clone",
                             "-e", "inject=clone:error=EINVAL:when=1"});
  running_tool t(args);
  const pid_t wrapper = std::stoi(t.read_line());
  // Named once it runs (see above).
  EXPECT_TRUE(eventually([&] { return children_named(wrapper, "shmsem-witness").size() == 1; }))
      << "no forked witness";
  t.close_stdin();
  EXPECT_EQ(t.wait(), 0);
}

TEST(ShmsemRun, ManyConcurrentShellsNeverExceedTheCapacity) {
  unique_key key;
  scratch_dir dir;
  constexpr int kShells = 10, kCapacity = 3;
  ASSERT_EQ(::mkdir((dir / "in").c_str(), 0700), 0);
  // Each command registers itself in in/ and counts who is in there. A
  // count above the capacity means more commands ran at once than the
  // semaphore allows. The first to count a full house marks it, and no
  // command leaves before that mark (or a long bound), so a semaphore
  // that works must be seen full: the bound is really put to the test.
  const std::string in = dir / "in", full = dir / "full";
  const std::string body = "mkdir " + in + "/$$ && n=$(ls " + in + " | wc -l) && echo $n >> " +
                           dir / "counts" + " && if [ $n -ge " + std::to_string(kCapacity) +
                           " ]; then touch " + full + "; fi; i=0; while [ ! -e " + full +
                           " ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; rmdir " + in +
                           "/$$";
  std::vector<std::unique_ptr<running_tool>> shells;
  for (int i = 0; i < kShells; ++i) {
    const std::string cmd = std::string(SHMSEM_BIN) + " run " + key.str() + " -p " +
                            std::to_string(kCapacity) + " -- sh -c '" + body + "'";
    shells.push_back(std::make_unique<running_tool>(std::vector<std::string>{"sh", "-c", cmd}));
  }
  for (auto& s : shells) EXPECT_EQ(s->wait(), 0) << s->stderr_text();
  std::ifstream counts(dir / "counts");
  int n = 0, most = 0;
  for (int c; counts >> c; ++n) most = std::max(most, c);
  EXPECT_EQ(n, kShells);
  EXPECT_EQ(most, kCapacity) << "the commands never filled the semaphore";
  auto sem = Semaphore::attach(key);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_EQ(sem.stats().acquired, static_cast<std::uint64_t>(kShells));
}

TEST(ShmsemRun, WarnsOnStderrWhenTheSeatIsLostWhileTheCommandRuns) {
  unique_key key;
  running_tool t(run_args(key, {"-p", "1"}, {"sh", "-c", "echo ready; read x; exit 0"}));
  ASSERT_EQ(t.read_line(), "ready");
  auto sem = Semaphore::attach(key);
  EXPECT_EQ(sem.force_release_all(), 1);
  EXPECT_TRUE(t.wait_stderr("seat was lost", 30s)) << t.stderr_text();
  t.close_stdin();
  EXPECT_EQ(t.wait(), 0);
}

TEST(ShmsemRun, AnExpiredTtlIsReportedAsALostSeat) {
  unique_key key;
  running_tool t(
      run_args(key, {"-p", "1", "--ttl", "100ms"}, {"sh", "-c", "echo ready; read x; exit 0"}));
  ASSERT_EQ(t.read_line(), "ready");
  EXPECT_TRUE(t.wait_stderr("seat was lost", 30s)) << t.stderr_text();
  t.close_stdin();
  EXPECT_EQ(t.wait(), 0);
}

TEST(ShmsemRun, AutoRenewKeepsAShortTtlAlive) {
  unique_key key;
  // The command's `sleep 1` outlasts five TTLs: that passage of time is the
  // behaviour under test, and only renewal keeps the seat through it.
  running_tool t(run_args(key, {"-p", "1", "--ttl", "200ms", "--auto-renew"},
                          {"sh", "-c", "echo ready; sleep 1; echo done"}));
  ASSERT_EQ(t.read_line(), "ready");
  EXPECT_EQ(t.read_line(), "done");
  EXPECT_EQ(t.wait(), 0);
  EXPECT_EQ(t.stderr_text().find("lost"), std::string::npos) << t.stderr_text();
  EXPECT_EQ(Semaphore::attach(key).stats().expired, 0u);
}

// A cron job or a shell loop pays this on every job: when COMMAND leaves no
// process behind, `shmsem run` must not read every process's descriptors
// (/proc/PID/fd of the whole host) to look for holders of its token.
TEST(ShmsemRun, ReadsNoOtherProcessWhenTheCommandLeavesNoneBehind) {
  REQUIRE_STRACE();
  unique_key key;
  scratch_dir dir;
  const std::string trace = dir / "trace";
  const auto r = run_tool({"strace", "-f", "-qq", "-E", "ASAN_OPTIONS=detect_leaks=0", "-o", trace,
                           "-e", "trace=openat,readlinkat,getdents64", SHMSEM_BIN, "run", key.str(),
                           "-p", "1", "--", "true"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(trace);
  const std::string self = "/proc/self/";
  int foreign = 0;
  std::string example;
  for (std::string l; std::getline(in, l);) {
    const auto at = l.find("\"/proc/");
    if (at == std::string::npos || l.compare(at + 1, self.size(), self) == 0) continue;
    // /proc/<a pid of the traced tree> is its own business; /proc/<pid>/fd of others is not.
    if (l.find("/fd") != std::string::npos && ++foreign == 1) example = l;
  }
  EXPECT_EQ(foreign, 0) << "e.g. " << example;
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
}

TEST(ShmsemRun, BadDurationIsAUsageError) {
  unique_key key;
  EXPECT_EQ(run_tool(run_args(key, {"-p", "1", "-w", "soon"}, {"true"})).status, 2);
  EXPECT_EQ(run_tool(run_args(key, {"-p", "1", "--auto-renew"}, {"true"})).status, 2);
  const auto both = run_tool(run_args(key, {"-p", "1", "--nonblock", "-w", "1s"}, {"true"}));
  EXPECT_EQ(both.status, 2);
  EXPECT_NE(both.err.find("--nonblock"), std::string::npos) << both.err;
}

// -------------------------------------------------------------- inspect

TEST(ShmsemInspect, LsShowsEachSemaphoreAndACorruptOne) {
  unique_key a("a"), bad("bad");
  auto sem = Semaphore::open(a, 4);
  auto p = sem.acquire(3);
  write_junk_segment(Semaphore::segment_path(bad));
  const auto r = shmsem_cli({"ls"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::string a_line, bad_line;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) {
    if (l.rfind(a.str() + " ", 0) == 0) a_line = l;
    if (l.rfind(bad.str() + " ", 0) == 0) bad_line = l;
  }
  EXPECT_NE(a_line.find("3/4"), std::string::npos) << r.out;
  EXPECT_NE(bad_line.find("corrupt"), std::string::npos) << r.out;
}

TEST(ShmsemInspect, LsWidensOnlyTheRowOfAVeryLongKey) {
  // A key as short as real ones are (unique_key's hold the test's name).
  struct short_key {
    std::string str_ = "t" + std::to_string(::getpid()) + ".ls";
    short_key() { Semaphore::remove(str_); }
    ~short_key() { Semaphore::remove(str_); }
    const std::string& str() const { return str_; }
  } a;
  unique_key long_key(std::string(150, 'k'));
  auto s1 = Semaphore::open(a.str(), 4);
  auto s2 = Semaphore::open(long_key, 2);
  const auto r = shmsem_cli({"ls"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::string a_line, long_line, titles;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) {
    if (l.rfind(a.str() + " ", 0) == 0) a_line = l;
    if (l.rfind(long_key.str() + " ", 0) == 0) long_line = l;
    if (l.rfind("KEY", 0) == 0) titles = l;
  }
  ASSERT_FALSE(a_line.empty()) << r.out;
  ASSERT_FALSE(long_line.empty()) << "the long key is shown whole\n" << r.out;
  EXPECT_NE(long_line.find("0/2"), std::string::npos) << long_line;
  // The other rows keep the width of the titles, far below the long key's.
  EXPECT_EQ(a_line.size(), titles.size()) << a_line << "\n" << titles;
  EXPECT_LT(titles.size(), long_key.str().size()) << titles;
  EXPECT_EQ(a_line.find("0/4"), titles.find("USED/CAP") + 5) << a_line << "\n" << titles;
}

TEST(ShmsemInspect, LsJsonParsesBack) {
  unique_key a;
  auto sem = Semaphore::open(a, 5);
  auto p = sem.acquire(2);
  const auto r = shmsem_cli({"ls", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  bool found = false;
  for (const auto& s : j)
    if (s["key"] == a.str()) {
      found = true;
      EXPECT_EQ(s["capacity"], 5);
      EXPECT_EQ(s["used"], 2);
      EXPECT_EQ(s["holders"][0]["pid"], ::getpid());
    }
  EXPECT_TRUE(found) << r.out;
}

TEST(ShmsemInspect, InfoShowsCountersAndHolders) {
  unique_key key;
  seat_holder h(key.str(), 3, 2);
  auto r = shmsem_cli({"info", key.str()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("capacity:        3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("used:            2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::to_string(h.proc.pid())), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("alive"), std::string::npos) << r.out;
  // How a waiter hears of a death (shared memory only: Redis leases end
  // with their sessions).
  if (!shmsem::test::on_redis()) {
    EXPECT_TRUE(r.out.find("deaths:          the kernel wakes the waiters") != std::string::npos ||
                r.out.find("deaths:          waiters look at the reclaim tick") !=
                    std::string::npos)
        << r.out;
  }
  r = shmsem_cli({"info", key.str(), "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.contains("death_wakeup"), !shmsem::test::on_redis()) << r.out;
  EXPECT_EQ(j["capacity"], 3);
  EXPECT_EQ(j["holders"].size(), 1u);
  EXPECT_EQ(j["holders"][0]["pid"], h.proc.pid());
  EXPECT_EQ(j["holders"][0]["weight"], 2);
  EXPECT_EQ(j["holders"][0]["state"], "alive");
  EXPECT_EQ(j["stats"]["acquired"], 1);
  EXPECT_TRUE(h.finish());
}

TEST(ShmsemInspect, InfoExitCodesForMissingAndCorruptSegments) {
  unique_key missing, bad;
  EXPECT_EQ(shmsem_cli({"info", missing.str()}).status, 3);
  write_junk_segment(Semaphore::segment_path(bad));
  const auto r = shmsem_cli({"info", bad.str()});
  EXPECT_EQ(r.status, 4) << r.out << r.err;
  EXPECT_NE(r.err.find(Semaphore::segment_path(bad)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not a shmsem segment"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("shmsem: shmsem:"), std::string::npos) << r.err;
}

// A file left empty by a creator that died before initializing it: it
// exists, so "no such semaphore" (3) would be wrong; it cannot be used (4).
TEST(ShmsemInspect, NeverInitializedFileCannotBeUsedRatherThanMissing) {
  unique_key key;
  const int fd = ::open(Semaphore::segment_path(key).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  auto r = shmsem_cli({"info", key.str()});
  EXPECT_EQ(r.status, 4) << r.out << r.err;
  EXPECT_NE(r.err.find("initialized"), std::string::npos) << r.err;
  EXPECT_EQ(shmsem_cli({"drain", key.str()}).status, 4);
  r = shmsem_cli({"ls"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string row;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(key.str() + " ", 0) == 0) row = l;
  EXPECT_NE(row.find("uninitialized"), std::string::npos) << r.out;
  // Given a capacity, run initializes it.
  EXPECT_EQ(run_tool(run_args(key, {"-p", "1"}, {"true"})).status, 0);
}

// One key that is not UTF-8, or one holder whose process name is not, must
// not break the JSON of the whole host: every --json output stays valid.
struct named_holder {
  shmsem::test::pipe_channel ready, go;
  child_process proc;
  named_holder(const std::string& key, const char* name)
      : proc([this, key, name] {
          ::prctl(PR_SET_NAME, name);
          auto sem = Semaphore::open(key, 2);
          auto p = sem.acquire();
          ready.send();
          go.receive(std::chrono::minutes(5));
          return 0;
        }) {
    ready.receive();
  }
  ~named_holder() { go.send(); }
};

nlohmann::json parsed(const tool_result& r) {
  EXPECT_EQ(r.status, 0) << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what() << "\n" << r.out;
    return {};
  }
}

const nlohmann::json* entry_with_prefix(const nlohmann::json& list, const std::string& prefix) {
  for (const auto& s : list)
    if (s.contains("key") && s["key"].get<std::string>().rfind(prefix, 0) == 0) return &s;
  return nullptr;
}

std::string hex_of(const std::string& bytes) {
  std::string hex;
  for (const unsigned char c : bytes) {
    hex += "0123456789abcdef"[c >> 4];
    hex += "0123456789abcdef"[c & 15];
  }
  return hex;
}

TEST(ShmsemInspect, JsonSurvivesAKeyThatIsNotUtf8) {
  unique_key key("x\xff");
  ASSERT_EQ(shmsem_cli({"create", key.str(), "-p", "2"}).status, 0);
  const std::string prefix = key.str().substr(0, key.str().size() - 1);
  const auto ls = parsed(shmsem_cli({"ls", "--json"}));
  const auto* e = entry_with_prefix(ls, prefix);
  ASSERT_NE(e, nullptr) << ls.dump();
  EXPECT_EQ((*e)["capacity"], 2);
  // The exact bytes, for scripts that must name the key again.
  EXPECT_EQ((*e)["key_hex"], hex_of(key.str()));
  const auto info = parsed(shmsem_cli({"info", key.str(), "--json"}));
  EXPECT_EQ(info["capacity"], 2);
  const auto top = parsed(run_tool({SEMTOP_BIN, "--json"}));
  EXPECT_NE(entry_with_prefix(top["semaphores"], prefix), nullptr);
}

TEST(ShmsemInspect, JsonSurvivesAHolderWhoseNameIsNotUtf8) {
  unique_key key;
  named_holder h(key.str(), "job\xff");
  const auto info = parsed(shmsem_cli({"info", key.str(), "--json"}));
  ASSERT_EQ(info["holders"].size(), 1u) << info.dump();
  EXPECT_EQ(info["holders"][0]["command"].get<std::string>().rfind("job", 0), 0u);
  const auto ls = parsed(shmsem_cli({"ls", "--json"}));
  EXPECT_NE(entry_with_prefix(ls, key.str()), nullptr);
  const auto top = parsed(run_tool({SEMTOP_BIN, "--json"}));
  EXPECT_NE(entry_with_prefix(top["semaphores"], key.str()), nullptr);
}

// A process stopped while it holds a segment's init lock must not freeze
// the inspection commands: they give up on that segment quickly and show
// it as busy (the library's default open timeout is 5 s).
struct stopped_initializer {
  child_process proc;
  explicit stopped_initializer(const std::string& key)
      : proc([key] {
          shmsem::detail::testing::set_hook([](shmsem::detail::testing::point p, std::string_view) {
            if (p == shmsem::detail::testing::point::initializing) ::raise(SIGSTOP);
          });
          Semaphore::open(key, 2);
          return 0;
        }) {
    EXPECT_TRUE(eventually([&] {
      std::ifstream stat("/proc/" + std::to_string(proc.pid()) + "/stat");
      std::string text;
      std::getline(stat, text);
      const auto close = text.rfind(')');
      return close != std::string::npos && text.size() > close + 2 && text[close + 2] == 'T';
    }));
  }
  ~stopped_initializer() { proc.kill(SIGKILL); }
};

TEST(ShmsemInspect, ASegmentWhoseInitializerIsStoppedShowsAsBusyAtOnce) {
  unique_key key;
  stopped_initializer stopped(key.str());
  auto timed = [](const std::vector<std::string>& argv) {
    const auto start = std::chrono::steady_clock::now();
    auto r = run_tool(argv);
    return std::make_pair(r, std::chrono::steady_clock::now() - start);
  };
  auto [ls, ls_took] = timed({SHMSEM_BIN, "ls"});
  EXPECT_EQ(ls.status, 0) << ls.err;
  EXPECT_LT(ls_took, 4s);
  std::string row;
  std::istringstream in(ls.out);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(key.str() + " ", 0) == 0) row = l;
  EXPECT_NE(row.find("busy"), std::string::npos) << ls.out;
  auto [info, info_took] = timed({SHMSEM_BIN, "info", key.str()});
  EXPECT_EQ(info.status, 4) << info.err;
  EXPECT_NE(info.err.find("init"), std::string::npos) << info.err;
  EXPECT_LT(info_took, 4s);
  auto [top, top_took] = timed({SEMTOP_BIN, "--once", "--filter", key.str()});
  EXPECT_EQ(top.status, 0) << top.err;
  EXPECT_NE(top.out.find("busy"), std::string::npos) << top.out;
  EXPECT_LT(top_took, 4s);
}

TEST(ShmsemInspect, MetricsPrintsAndWritesTheExposition) {
  unique_key key;
  scratch_dir dir;
  auto sem = Semaphore::open(key, 7);
  auto r = shmsem_cli({"metrics"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string series = "shmsem_permits_capacity{key=\"" + key.str() + "\"} 7";
  EXPECT_NE(r.out.find(series), std::string::npos) << r.out;
  r = shmsem_cli({"metrics", "--textfile", dir / "shmsem.prom"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream f(dir / "shmsem.prom");
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_NE(text.str().find(series), std::string::npos) << text.str();
}

// strace shows the order of the system calls, which is the whole promise
// here: the data is on disk before the rename makes it visible, and the
// rename is on disk after the directory is flushed.
TEST(ShmsemInspect, MetricsTextfileIsFlushedBeforeTheRenameAndTheDirectoryAfter) {
  REQUIRE_STRACE();
  scratch_dir dir;
  const std::string file = dir / "shmsem.prom";
  const std::string trace = dir / "trace";
  // LeakSanitizer cannot run under ptrace: in the sanitizer build the
  // traced tool would abort at exit instead of reporting.
  const auto r = run_tool({"strace", "-f", "-qq", "-E", "ASAN_OPTIONS=detect_leaks=0", "-o", trace,
                           "-e", "trace=openat,fsync,fdatasync,rename,renameat,renameat2",
                           SHMSEM_BIN, "metrics", "--textfile", file});
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(trace);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  auto result_fd = [](const std::string& l) {
    const auto eq = l.rfind("= ");
    return eq == std::string::npos ? std::string() : l.substr(eq + 2);
  };
  auto find = [&](std::size_t from, auto pred) {
    for (std::size_t i = from; i < lines.size(); ++i)
      if (pred(lines[i])) return i;
    return lines.size();
  };
  auto has = [](const std::string& l, const std::string& what) {
    return l.find(what) != std::string::npos;
  };
  const std::size_t tmp_open = find(
      0, [&](const std::string& l) { return has(l, "openat(") && has(l, "\"" + file + ".tmp."); });
  ASSERT_LT(tmp_open, lines.size()) << "no temporary file opened";
  const std::string tmp_fd = result_fd(lines[tmp_open]);
  const std::size_t renamed = find(tmp_open, [&](const std::string& l) {
    return has(l, "rename") && has(l, ", \"" + file + "\"") && has(l, "= 0");
  });
  ASSERT_LT(renamed, lines.size()) << "no rename onto " << file;
  const std::size_t synced = find(tmp_open, [&](const std::string& l) {
    return has(l, "fsync(" + tmp_fd + ")") || has(l, "fdatasync(" + tmp_fd + ")");
  });
  EXPECT_LT(synced, renamed) << "the temporary file was not flushed before the rename";
  const std::size_t dir_open = find(renamed, [&](const std::string& l) {
    return has(l, "openat(") && has(l, "\"" + dir.path + "\"") && has(l, "O_DIRECTORY");
  });
  ASSERT_LT(dir_open, lines.size()) << "the directory was not opened after the rename";
  const std::string dir_fd = result_fd(lines[dir_open]);
  EXPECT_LT(find(dir_open, [&](const std::string& l) { return has(l, "fsync(" + dir_fd + ")"); }),
            lines.size())
      << "the directory was not flushed after the rename";
}

// ---------------------------------------------------------------- admin

TEST(ShmsemAdmin, CreateSetsCapacityAndMode) {
  unique_key key;
  auto r = shmsem_cli({"create", key.str(), "-p", "6", "--mode", "0660"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(Semaphore::attach(key).capacity(), 6);
  struct stat st {};
  ASSERT_EQ(::stat(Semaphore::segment_path(key).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(shmsem_cli({"create", key.str(), "-p", "6"}).status, 0);
  r = shmsem_cli({"create", key.str(), "-p", "9"});
  EXPECT_EQ(r.status, 5);
  EXPECT_NE(r.err.find("resize"), std::string::npos) << r.err;
  EXPECT_EQ(shmsem_cli({"create", key.str(), "-p", "1", "--mode", "rw"}).status, 2);
}

TEST(ShmsemAdmin, CreateStoresTheFairnessAndInfoShowsIt) {
  unique_key key;
  auto r = shmsem_cli({"create", key.str(), "-p", "2", "--fairness", "barging"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("fairness barging"), std::string::npos) << r.out;
  EXPECT_EQ(Semaphore::attach(key).snapshot().fairness, shmsem::Fairness::barging);
  EXPECT_EQ(parsed(shmsem_cli({"info", key.str(), "--json"}))["fairness"], "barging");
  r = shmsem_cli({"info", key.str()});
  EXPECT_NE(r.out.find("barging"), std::string::npos) << r.out;
  // The policy is the segment's: asking for another one later is refused.
  EXPECT_EQ(shmsem_cli({"create", key.str(), "-p", "2", "--fairness", "barging"}).status, 0);
  r = shmsem_cli({"create", key.str(), "-p", "2", "--fairness", "fifo"});
  EXPECT_EQ(r.status, 5);
  EXPECT_NE(r.err.find("exists with fairness barging"), std::string::npos) << r.err;
  EXPECT_EQ(shmsem_cli({"create", key.str(), "-p", "2", "--fairness", "fast"}).status, 2);
  unique_key plain, ordered;
  ASSERT_EQ(shmsem_cli({"create", plain.str(), "-p", "1"}).status, 0);
  EXPECT_EQ(parsed(shmsem_cli({"info", plain.str(), "--json"}))["fairness"], "barging");
  ASSERT_EQ(shmsem_cli({"create", ordered.str(), "-p", "1", "--fairness", "fifo"}).status, 0);
  EXPECT_EQ(parsed(shmsem_cli({"info", ordered.str(), "--json"}))["fairness"], "fifo");
}

TEST(ShmsemAdmin, ResizeChangesTheCapacity) {
  unique_key key;
  auto sem = Semaphore::open(key, 2);
  auto r = shmsem_cli({"resize", key.str(), "5"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 -> 5"), std::string::npos) << r.out;
  EXPECT_EQ(sem.capacity(), 5);
  EXPECT_EQ(shmsem_cli({"resize", key.str(), "0"}).status, 2);
}

TEST(ShmsemAdmin, DrainFreesEverySeatAndCountsLiveHolders) {
  unique_key key;
  seat_holder h1(key.str(), 4, 1), h2(key.str(), 4, 2);
  const auto r = shmsem_cli({"drain", key.str()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 live holder leases displaced"), std::string::npos) << r.out;
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
  EXPECT_FALSE(h1.finish());
  EXPECT_FALSE(h2.finish());
}

TEST(ShmsemAdmin, ReapReclaimsASigkilledHoldersSeats) {
  unique_key key;
  seat_holder h(key.str(), 2, 2);
  // Stay attached: a process that attaches to a segment nobody else has
  // open recovers it (reaping the dead) by itself, which would leave
  // nothing for the command to do.
  auto sem = Semaphore::attach(key);
  h.proc.kill(SIGKILL);
  ASSERT_EQ(sem.holders().size(), 1u);
  EXPECT_EQ(sem.holders()[0].state, shmsem::HolderState::dead);
  const auto r = shmsem_cli({"reap", key.str()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("reaped 2 seats"), std::string::npos) << r.out;
  EXPECT_EQ(sem.used(), 0);
  EXPECT_EQ(sem.stats().reaped, 1u);
}

TEST(ShmsemAdmin, WaitIdleTimesOutWhileHeldAndReturnsOnceFree) {
  unique_key key;
  auto sem = Semaphore::open(key, 1);
  auto p = sem.acquire();
  EXPECT_EQ(shmsem_cli({"wait-idle", key.str(), "-w", "200ms"}).status, 1);
  running_tool waiter({SHMSEM_BIN, "wait-idle", key.str(), "-w", "60s"});
  // The release must find the command asleep in its wait, or only the
  // already-idle path would run.
  ASSERT_TRUE(eventually([&] { return asleep_in_futex(waiter.pid(), waiter.pid()); }));
  p.release();
  EXPECT_EQ(waiter.wait(), 0) << waiter.stderr_text();
}

TEST(ShmsemAdmin, RmRemovesAndReportsAMissingKey) {
  unique_key key;
  { Semaphore::open(key, 1); }
  EXPECT_EQ(shmsem_cli({"rm", key.str()}).status, 0);
  EXPECT_FALSE(exists(Semaphore::segment_path(key)));
  EXPECT_EQ(shmsem_cli({"rm", key.str()}).status, 3);
}

std::string own_prefix() {
  return "test." + std::to_string(::getpid()) + ".";
}

TEST(ShmsemAdmin, GcRemovesOnlySegmentsNoLiveProcessUses) {
  unique_key unused("unused"), held("held"), attached("attached");
  ASSERT_EQ(shmsem_cli({"create", unused.str(), "-p", "1"}).status, 0);
  seat_holder h(held.str(), 2, 1);
  ASSERT_EQ(shmsem_cli({"create", attached.str(), "-p", "1"}).status, 0);
  // A process that has the semaphore attached but holds nothing.
  pipe_channel ready, go;
  child_process idle([&] {
    auto sem = Semaphore::attach(attached);
    ready.send();
    go.receive(std::chrono::minutes(5));
    return sem.capacity() == 1 ? 0 : 1;
  });
  ASSERT_EQ(ready.receive(), '.');

  auto r = shmsem_cli({"gc", "--dry-run", "--prefix", own_prefix()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("would remove " + unused.str()), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("would remove " + held.str()), std::string::npos) << r.out;
  EXPECT_TRUE(exists(Semaphore::segment_path(unused)));

  r = shmsem_cli({"gc", "--prefix", own_prefix()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("removed " + unused.str()), std::string::npos) << r.out;
  EXPECT_FALSE(exists(Semaphore::segment_path(unused)));
  EXPECT_TRUE(exists(Semaphore::segment_path(held)));
  EXPECT_TRUE(exists(Semaphore::segment_path(attached)));
  go.send();
  EXPECT_EQ(idle.wait(), 0);
  EXPECT_TRUE(h.finish());
}

TEST(ShmsemAdmin, GcRacingAnAttachNeverRemovesASegmentInUse) {
  // Each round: an unused semaphore, then a child that attaches and takes a
  // seat while gc runs. Either gc removed the name first (the child's
  // attach fails, nothing is lost) or the child's seat must still be
  // visible under the name afterwards: gc must never unlink a segment that
  // a process had attached.
  int removed_first = 0, attached_first = 0;
  for (int round = 0; round < 15; ++round) {
    unique_key key(std::to_string(round));
    ASSERT_EQ(shmsem_cli({"create", key.str(), "-p", "1"}).status, 0);
    pipe_channel go, result, done;
    child_process c([&] {
      go.receive();
      try {
        auto sem = Semaphore::attach(key);
        auto p = sem.acquire();
        result.send('h');
        done.receive(std::chrono::minutes(5));
        return 0;
      } catch (const shmsem::SegmentError& e) {
        result.send(e.code() == shmsem::errc::not_found ? 'g' : 'e');
        return 0;
      }
    });
    running_tool gc({SHMSEM_BIN, "gc", "--prefix", key.str()});
    go.send();
    const char what = result.receive();
    EXPECT_EQ(gc.wait(), 0) << gc.stderr_text();
    if (what == 'h') {
      ++attached_first;
      // The child holds its seat: the named segment must be the one it holds.
      try {
        EXPECT_EQ(Semaphore::attach(key).used(), 1) << "round " << round;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "round " << round << ": gc removed a segment in use: " << e.what();
      }
    } else {
      EXPECT_EQ(what, 'g') << "round " << round;
      ++removed_first;
    }
    done.send();
    EXPECT_EQ(c.wait(), 0);
  }
  std::cout << "gc first: " << removed_first << ", attach first: " << attached_first << "\n";
}

TEST(ShmsemCommands, EveryCommandHasHelp) {
  for (const char* cmd : {"run", "ls", "info", "metrics", "create", "resize", "drain", "reap",
                          "wait-idle", "rm", "gc"}) {
    const auto r = shmsem_cli({cmd, "--help"});
    EXPECT_EQ(r.status, 0) << cmd;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << cmd << ": " << r.out;
  }
  const auto r = shmsem_cli({"--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("Exit codes"), std::string::npos) << r.out;
}

TEST(ShmsemCommands, UnknownCommandOrMissingArgumentIsAUsageError) {
  EXPECT_EQ(shmsem_cli({"frobnicate"}).status, 2);
  EXPECT_EQ(shmsem_cli({"create"}).status, 2);
  EXPECT_EQ(shmsem_cli({}).status, 2);
}

}  // namespace
