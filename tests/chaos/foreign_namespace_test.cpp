// foreign_namespace_test.cpp: a process in another PID namespace (started by
// `unshare --pid --fork`, as a container would be) shares the semaphore. Its
// PIDs collide with ours, so liveness must not come from PIDs: it must not
// reap our live holders, we must not reap it while it lives, and once it is
// killed its seat comes back. Skipped, saying why, where unshare is refused.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "fault_util.hpp"
#include "seat_holder.hpp"
#include "test_support.hpp"

#ifndef SHMSEM_FAULT_HELPER
#error "SHMSEM_FAULT_HELPER must name the fault_helper program"
#endif

namespace shmsem {
namespace {

// A program run with pipes on stdin and stdout.
class program {
 public:
  explicit program(std::vector<std::string> argv) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = ::fdopen(out[0], "r");
  }
  ~program() {
    if (to_ >= 0) ::close(to_);
    if (from_) std::fclose(from_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  std::string line() {
    char buf[256];
    if (!from_ || !std::fgets(buf, sizeof buf, from_)) return "";
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void say(const char* s) { (void)!::write(to_, s, std::strlen(s)); }
  int wait() {
    int st = 0;
    if (pid_ <= 0) return -1;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
};

std::vector<std::string> in_new_pid_namespace(std::vector<std::string> argv) {
  std::vector<std::string> v = {"unshare", "--pid", "--fork", "--kill-child"};
  v.insert(v.end(), argv.begin(), argv.end());
  return v;
}

class ForeignNamespace : public ::testing::Test {
 protected:
  void SetUp() override {
    program probe(in_new_pid_namespace({"true"}));
    const int rc = probe.wait();
    if (rc != 0)
      SHMSEM_SKIP_WITHOUT_CAPABILITY(
          "`unshare --pid --fork` is not permitted here (exit "
          << rc << "): the foreign PID namespace tests need root or user namespaces");
  }
};

TEST_F(ForeignNamespace, ForeignHolderIsNotReapedWhileItLivesAndIsReapedOnceKilled) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  program holder(in_new_pid_namespace({SHMSEM_FAULT_HELPER, "hold", key.str(), "1"}));
  ASSERT_EQ(holder.line(), "held");
  ASSERT_EQ(sem.holders().size(), 1u);
  EXPECT_TRUE(sem.holders()[0].foreign_namespace);
  EXPECT_EQ(sem.holders()[0].state, HolderState::alive);
  EXPECT_EQ(sem.reap(), 0) << "a live holder in another PID namespace was reaped";
  EXPECT_FALSE(sem.try_acquire().has_value());
  // Killing unshare kills its child (--kill-child), the namespace's init.
  ::kill(holder.pid(), SIGKILL);
  holder.wait();
  auto p = sem.acquire(1, {.wait_timeout = std::chrono::seconds(10)});
  EXPECT_TRUE(p.is_held());
  EXPECT_EQ(sem.stats().reaped, 1u);
}

TEST_F(ForeignNamespace, ForeignReaperDoesNotReapOurLiveHolders) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 2);
  Permit mine = sem.acquire();
  test::seat_holder other(key.str(), 2, 1);
  program reaper(in_new_pid_namespace({SHMSEM_FAULT_HELPER, "reap", key.str()}));
  EXPECT_EQ(reaper.line(), "freed=0 used=2 held=2 foreign=2 alive=2");
  EXPECT_EQ(reaper.wait(), 0);
  EXPECT_TRUE(mine.is_held());
  EXPECT_EQ(sem.used(), 2);
}

TEST_F(ForeignNamespace, ForeignHolderReleasesNormally) {
  test::unique_key key;
  Semaphore sem = Semaphore::open(key, 1);
  program holder(in_new_pid_namespace({SHMSEM_FAULT_HELPER, "hold", key.str(), "1"}));
  ASSERT_EQ(holder.line(), "held");
  holder.say("go\n");
  EXPECT_EQ(holder.line(), "released");
  EXPECT_EQ(holder.wait(), 0);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_EQ(sem.stats().released, 1u);
}

}  // namespace
}  // namespace shmsem
