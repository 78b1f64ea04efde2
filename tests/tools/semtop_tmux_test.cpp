// The interactive semtop in a real terminal: tmux (a server of its own per
// test) runs it, send-keys types, capture-pane reads the screen.
#include "seat_holder.hpp"
#include "test_support.hpp"
#include "tool_runner.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace {

using namespace std::chrono_literals;
using shmsem::Semaphore;
using shmsem::test::child_process;
using shmsem::test::eventually;
using shmsem::test::pipe_channel;
using shmsem::test::seat_holder;
using shmsem::test::tmux_session;
using shmsem::test::unique_key;

std::string own_prefix() {
  return "test." + std::to_string(::getpid()) + ".";
}

// A wrapper script that runs semtop in the pane, then prints how it ended
// and whether the terminal is back in its normal (canonical, echoing) mode.
// It traps SIGINT so that a Ctrl-C, which the whole foreground group gets,
// ends semtop but not the report. The typed line does not contain what the
// test looks for ("EXIT=0", "TTY_SANE"), only the output does.
class semtop_runner {
 public:
  semtop_runner() {
    char tmpl[] = "/tmp/semtop-tmux-test.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    std::ofstream(dir_ + "/run.sh") << "pidfile=$1; shift\n"
                                       "trap : INT\n"
                                       "sh -c 'echo $$ > \"$0\"; exec \"$@\"' \"$pidfile\" \"$@\"\n"
                                       "echo EXIT=$?\n"
                                       "case \"$(stty -a)\" in *-icanon*|*'-echo '*) t=BROKEN;; "
                                       "*) t=SANE;; esac\n"
                                       "echo TTY_$t\n";
  }
  ~semtop_runner() {
    std::remove((dir_ + "/run.sh").c_str());
    std::remove((dir_ + "/pid").c_str());
    ::rmdir(dir_.c_str());
  }
  std::string line(const std::string& args) const {
    return "sh " + dir_ + "/run.sh " + dir_ + "/pid " + SEMTOP_BIN + " -d 0.2 " + args;
  }
  pid_t pid() const {
    pid_t p = -1;
    std::ifstream(dir_ + "/pid") >> p;
    return p;
  }

 private:
  std::string dir_;
};

std::string semtop_line(const std::string& args) {
  static semtop_runner runner;
  return runner.line(args);
}

// After semtop ended: its exit status is shown and the terminal is sane.
void expect_terminal_restored(const tmux_session& t, const std::string& exit_line) {
  ASSERT_TRUE(t.wait_for(exit_line));
  ASSERT_TRUE(t.wait_for("TTY_"));
  const auto text = t.capture_text();
  EXPECT_NE(text.find("TTY_SANE"), std::string::npos) << text;
  // Back on the normal screen (the wrapper's output is there): the table is gone.
  EXPECT_EQ(text.find("USED/CAP"), std::string::npos) << text;
}

TEST(SemtopTmux, ShowsAHeldSemaphoreAndItsHolderOnEnter) {
  unique_key key;
  seat_holder h(key.str(), 3, 2);
  tmux_session t(160, 40);
  t.type_line(semtop_line("--filter " + key.str()));
  ASSERT_TRUE(t.wait_for(key.str()));
  ASSERT_TRUE(t.wait_for("2/3"));
  EXPECT_TRUE(t.wait_for("67%"));
  t.send_keys({"Enter"});
  ASSERT_TRUE(t.wait_for("holders of " + key.str()));
  EXPECT_TRUE(t.wait_for(std::to_string(h.proc.pid())));
  std::string comm;
  std::getline(std::ifstream("/proc/" + std::to_string(h.proc.pid()) + "/comm"), comm);
  ASSERT_FALSE(comm.empty());
  EXPECT_TRUE(t.wait_for(comm));
  EXPECT_TRUE(t.wait_for("alive"));
  EXPECT_TRUE(t.wait_for("waiters: 0"));
  t.send_keys({"Escape"});
  EXPECT_TRUE(t.wait_for("USED/CAP"));
  t.send_keys({"q"});
  expect_terminal_restored(t, "EXIT=0");
  EXPECT_TRUE(h.finish());
}

TEST(SemtopTmux, SlashFiltersByKeySubstring) {
  unique_key alpha("alpha"), beta("beta");
  auto a = Semaphore::open(alpha, 1);
  auto b = Semaphore::open(beta, 1);
  tmux_session t(160, 40);
  t.type_line(semtop_line("--filter " + own_prefix()));
  ASSERT_TRUE(t.wait_for(alpha.str()));
  ASSERT_TRUE(t.wait_for(beta.str()));
  t.send_keys({"/"});
  ASSERT_TRUE(t.wait_for("Filter:"));
  t.send_keys({"-l", own_prefix()});
  t.send_keys({"-l", std::string(alpha.str().substr(own_prefix().size()))});
  t.send_keys({"Enter"});
  ASSERT_TRUE(t.wait_gone(beta.str()));
  EXPECT_TRUE(t.wait_for(alpha.str()));
  EXPECT_TRUE(t.wait_for("1 semaphore "));
  t.send_keys({"q"});
  expect_terminal_restored(t, "EXIT=0");
}

TEST(SemtopTmux, ForceReleaseNeedsYesAndThenFreesTheSeats) {
  unique_key key;
  seat_holder h(key.str(), 2, 2);
  tmux_session t(160, 40);
  t.type_line(semtop_line("--filter " + key.str()));
  ASSERT_TRUE(t.wait_for("2/2"));
  t.send_keys({"D"});
  ASSERT_TRUE(t.wait_for("Force-release ALL seats of " + key.str()));
  t.send_keys({"n"});
  ASSERT_TRUE(t.wait_for("not drained"));
  EXPECT_EQ(Semaphore::attach(key).used(), 2);
  t.send_keys({"D"});
  ASSERT_TRUE(t.wait_for("Force-release ALL seats of " + key.str()));
  t.send_keys({"y"});
  ASSERT_TRUE(t.wait_for("1 live lease displaced"));
  EXPECT_TRUE(t.wait_for("0/2"));
  EXPECT_EQ(Semaphore::attach(key).used(), 0);
  t.send_keys({"q"});
  expect_terminal_restored(t, "EXIT=0");
  EXPECT_FALSE(h.finish());
}

TEST(SemtopTmux, ReadonlyRefusesForceRelease) {
  unique_key key;
  seat_holder h(key.str(), 1, 1);
  tmux_session t(160, 40);
  t.type_line(semtop_line("--readonly --filter " + key.str()));
  ASSERT_TRUE(t.wait_for("1/1"));
  t.send_keys({"D"});
  ASSERT_TRUE(t.wait_for("read-only: force-release disabled"));
  t.send_keys({"y"});
  EXPECT_EQ(Semaphore::attach(key).used(), 1);
  t.send_keys({"q"});
  expect_terminal_restored(t, "EXIT=0");
  EXPECT_TRUE(h.finish());
}

TEST(SemtopTmux, RedrawsForTheNewSizeOnResize) {
  unique_key key;
  auto sem = Semaphore::open(key, 4);
  tmux_session t(160, 40);
  t.type_line(semtop_line("--filter " + key.str()));
  ASSERT_TRUE(t.wait_for("0/4"));
  auto lines = t.capture();
  ASSERT_EQ(lines.size(), 40u);
  EXPECT_NE(lines[39].find("q quit"), std::string::npos) << t.capture_text();
  t.resize(90, 15);
  // The footer moves to the new last line and the table still fits.
  ASSERT_TRUE(eventually([&] {
    lines = t.capture();
    return lines.size() == 15u && lines[14].find("q quit") != std::string::npos;
  }));
  EXPECT_NE(t.capture_text().find("USED/CAP"), std::string::npos) << t.capture_text();
  EXPECT_NE(t.capture_text().find("0/4"), std::string::npos) << t.capture_text();
  for (const auto& l : t.capture()) EXPECT_LE(l.size(), 90u) << l;
  t.send_keys({"q"});
  expect_terminal_restored(t, "EXIT=0");
}

TEST(SemtopTmux, ShowsACorruptSegmentAsCorrupt) {
  unique_key good("good"), bad("bad");
  auto sem = Semaphore::open(good, 2);
  const int fd = ::open(Semaphore::segment_path(bad).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  const std::string junk(4096, '\x33');
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), 4096);
  ::close(fd);
  tmux_session t(200, 40);
  t.type_line(semtop_line("--filter " + own_prefix()));
  ASSERT_TRUE(t.wait_for("0/2"));
  EXPECT_TRUE(t.wait_for("corrupt"));
  EXPECT_TRUE(t.wait_for("1 unreadable"));
  t.send_keys({"q"});
  expect_terminal_restored(t, "EXIT=0");
}

TEST(SemtopTmux, SigtermRestoresTheTerminal) {
  semtop_runner runner;
  tmux_session t(120, 30);
  t.type_line(runner.line("--filter " + own_prefix()));
  ASSERT_TRUE(t.wait_for("USED/CAP"));
  const pid_t pid = runner.pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  expect_terminal_restored(t, "EXIT=143");
}

TEST(SemtopTmux, CtrlCRestoresTheTerminal) {
  tmux_session t(120, 30);
  t.type_line(semtop_line("--filter " + own_prefix()));
  ASSERT_TRUE(t.wait_for("USED/CAP"));
  t.send_keys({"C-c"});
  expect_terminal_restored(t, "EXIT=130");
}

TEST(SemtopTmux, HelpListsTheKeys) {
  tmux_session t(120, 30);
  t.type_line(semtop_line("--filter " + own_prefix()));
  ASSERT_TRUE(t.wait_for("USED/CAP"));
  t.send_keys({"h"});
  ASSERT_TRUE(t.wait_for("cycle the sort"));
  t.send_keys({"x"});
  ASSERT_TRUE(t.wait_for("USED/CAP"));
  t.send_keys({"s"});
  EXPECT_TRUE(t.wait_for("sort: util"));
  t.send_keys({"F10"});
  expect_terminal_restored(t, "EXIT=0");
}

}  // namespace
