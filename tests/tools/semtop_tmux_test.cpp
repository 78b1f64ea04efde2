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
#include <set>
#include <sstream>

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

// The columns a captured line takes: its UTF-8 code points (an elided key
// holds a three-byte ellipsis).
int columns(const std::string& line) {
  int n = 0;
  for (const unsigned char c : line) n += (c & 0xC0) != 0x80;
  return n;
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
  for (const auto& l : t.capture()) EXPECT_LE(columns(l), 90) << l;
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

// ------------------------------------------------------- small terminals

// The pane lines that contain `text`.
std::vector<std::string> lines_with(const tmux_session& t, const std::string& text) {
  std::vector<std::string> out;
  for (const auto& l : t.capture())
    if (l.find(text) != std::string::npos) out.push_back(l);
  return out;
}

class SemtopSmallTerminal : public ::testing::TestWithParam<std::pair<int, int>> {};

// Two keys that differ only at the end stay two keys: the KEY column
// elides the middle, not the tail.
TEST_P(SemtopSmallTerminal, KeysThatDifferAtTheEndStayDistinguishable) {
  const auto [width, height] = GetParam();
  unique_key primary("svc.backend.primary"), replica("svc.backend.replica");
  auto a = Semaphore::open(primary, 1);
  auto b = Semaphore::open(replica, 1);
  tmux_session t(width, height);
  t.type_line(semtop_line("--filter " + own_prefix()));
  ASSERT_TRUE(t.wait_for("USED/CAP"));
  // At 60 columns KEY has 8: "te…imary".
  ASSERT_TRUE(t.wait_for("mary ")) << "the differing tail of the key is cut off";
  ASSERT_TRUE(t.wait_for("lica "));
  const auto p = lines_with(t, "mary "), r = lines_with(t, "lica ");
  ASSERT_EQ(p.size(), 1u) << t.capture_text();
  ASSERT_EQ(r.size(), 1u) << t.capture_text();
  // The elision is marked, and the figures still follow the key.
  EXPECT_NE(p[0].find("\u2026"), std::string::npos) << p[0];
  EXPECT_NE(p[0].find("0/1"), std::string::npos) << p[0];
  for (const auto& l : t.capture()) EXPECT_LE(columns(l), width) << l;
  t.send_keys({"q"});
  expect_terminal_restored(t, "EXIT=0");
}

// A dead holder must be told from a live one in the holder view.
TEST_P(SemtopSmallTerminal, HolderStateStaysReadable) {
  const auto [width, height] = GetParam();
  unique_key key;
  seat_holder alive(key.str(), 2, 1);
  seat_holder doomed(key.str(), 2, 1);
  doomed.proc.kill(SIGKILL);
  doomed.finished = true;
  tmux_session t(width, height);
  t.type_line(semtop_line("--filter " + key.str()));
  ASSERT_TRUE(t.wait_for("2/2"));
  t.send_keys({"Enter"});
  ASSERT_TRUE(t.wait_for("STATE"));
  EXPECT_TRUE(t.wait_for("alive"));
  EXPECT_TRUE(t.wait_for("dead"));
  const auto live = lines_with(t, std::to_string(alive.proc.pid()));
  ASSERT_EQ(live.size(), 1u) << t.capture_text();
  EXPECT_NE(live[0].find("alive"), std::string::npos) << live[0];
  t.send_keys({"q"});
  expect_terminal_restored(t, "EXIT=0");
  EXPECT_TRUE(alive.finish());
}

// Every word of the help is shown whole, and all of it can be reached.
TEST_P(SemtopSmallTerminal, HelpWrapsWithoutCuttingWords) {
  const auto [width, height] = GetParam();
  tmux_session t(width, height);
  t.type_line(semtop_line("--filter " + own_prefix()));
  ASSERT_TRUE(t.wait_for("USED/CAP"));
  t.send_keys({"h"});
  ASSERT_TRUE(t.wait_for("cycle the sort"));
  std::string seen;
  // Scroll to the end, collecting what was shown.
  for (int i = 0; i < 40; ++i) {
    seen += t.capture_text();
    if (seen.find("any other key returns") != std::string::npos) break;
    t.send_keys({"Down"});
  }
  EXPECT_NE(seen.find("any other key returns"), std::string::npos) << seen;
  // Words that sat at the right edge of an 80-column line: each shows whole.
  std::set<std::string> words;
  std::istringstream in(seen);
  for (std::string w; in >> w;) words.insert(w);
  for (const char* word :
       {"y/N)", "used/capacity;", "timeouts", "creation;", "header's", "made", "key."})
    EXPECT_TRUE(words.count(word)) << word << "\n" << seen;
  for (const auto& l : t.capture()) EXPECT_LE(columns(l), width) << l;
  t.send_keys({"Escape"});
  ASSERT_TRUE(t.wait_for("USED/CAP"));
  t.send_keys({"q"});
  expect_terminal_restored(t, "EXIT=0");
}

INSTANTIATE_TEST_SUITE_P(Sizes, SemtopSmallTerminal,
                         ::testing::Values(std::make_pair(80, 24), std::make_pair(60, 20)),
                         [](const auto& info) {
                           return std::to_string(info.param.first) + "x" +
                                  std::to_string(info.param.second);
                         });

}  // namespace
