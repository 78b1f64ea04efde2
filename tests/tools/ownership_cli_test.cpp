// The tools against squatted, shared and removed segments, as users run
// them: real uids (root, nobody, bare uids through setpriv), the real
// binaries, real /dev/shm. Root's `shmsem run` refuses a key another user
// made and says how to trust it; ls, info and semtop show every segment's
// owner and mark one this user would refuse, without writing to it; admin
// commands act on another user's segment only as root; rm refuses a
// semaphore in use and names its users, and --force splits it with a
// warning that the attached processes repeat once. The runs as other users
// must work from a build tree those users cannot enter.
#include "seat_holder.hpp"
#include "test_support.hpp"
#include "tool_runner.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <shmsem/logging.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <system_error>

namespace {

using namespace std::chrono_literals;
using shmsem::Semaphore;
using shmsem::test::child_process;
using shmsem::test::eventually;
using shmsem::test::pipe_channel;
using shmsem::test::run_tool;
using shmsem::test::seat_holder;
using shmsem::test::tool_result;
using shmsem::test::unique_key;

// The tool as another user runs from a copy, with a copy of the library
// beside it: the build tree may sit in a directory other users cannot
// enter (a clone under a home directory of mode 0700, a `mktemp -d`), and
// then that user could not even load libshmsem.so.0 from it. The copies go
// to a fresh mode-0755 directory under /tmp (not $TMPDIR, which may be
// private too).
class tool_for_other_users {
 public:
  tool_for_other_users() {
    namespace fs = std::filesystem;
    std::string tmpl = "/tmp/shmsem-other-user-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    dir_ = tmpl;
    fs::permissions(dir_, fs::perms(0755));
    fs::copy_file(SHMSEM_BIN, dir_ / "shmsem");
    fs::permissions(dir_ / "shmsem", fs::perms(0755));
    fs::copy_file(SHMSEM_LIB, dir_ / SHMSEM_LIB_NAME);
    fs::permissions(dir_ / SHMSEM_LIB_NAME, fs::perms(0644));
    // Every folder above must let others through; say which one does not.
    for (fs::path p = dir_; p != p.root_path(); p = p.parent_path())
      if ((fs::status(p).permissions() & fs::perms::others_exec) == fs::perms::none)
        throw std::runtime_error(p.string() + " is not traversable by other users (mode o+x), so " +
                                 "they cannot run the copy of shmsem in " + dir_.string());
  }
  ~tool_for_other_users() {
    if (::getpid() != owner_) return;  // a forked child leaves it to its parent
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  tool_for_other_users(const tool_for_other_users&) = delete;
  tool_for_other_users& operator=(const tool_for_other_users&) = delete;

  // argv that runs the copy: the library beside it comes first in the search.
  std::vector<std::string> argv() const {
    return {"env", "LD_LIBRARY_PATH=" + dir_.string(), (dir_ / "shmsem").string()};
  }

 private:
  std::filesystem::path dir_;
  pid_t owner_ = ::getpid();
};

// The shmsem CLI as `uid` (its own group, no others), or as root.
tool_result shmsem_as(const std::string& uid, std::vector<std::string> args) {
  std::vector<std::string> argv;
  if (uid.empty()) {
    argv.push_back(SHMSEM_BIN);
  } else {
    static const tool_for_other_users copy;
    argv = {"setpriv", "--reuid=" + uid, "--regid=" + uid, "--clear-groups"};
    const auto run = copy.argv();
    argv.insert(argv.end(), run.begin(), run.end());
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return run_tool(argv);
}
tool_result shmsem_cli(std::vector<std::string> args) {
  return shmsem_as("", std::move(args));
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

bool exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

std::string line_of(const std::string& text, const std::string& start) {
  std::size_t at = 0;
  while (at < text.size()) {
    const auto end = text.find('\n', at);
    const std::string line = text.substr(at, end == std::string::npos ? end : end - at);
    if (line.rfind(start, 0) == 0) return line;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return {};
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class Ownership : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) SHMSEM_SKIP_WITHOUT_CAPABILITY("needs root to switch users");
  }
};

TEST_F(Ownership, RootsRunRefusesAKeyNobodySquattedAndSaysHowToTrustIt) {
  unique_key key;
  auto r = shmsem_as("65534", {"create", key.str(), "-p", "100", "--mode", "0666"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string path = Semaphore::segment_path(key);
  const std::string before = contents(path);
  r = shmsem_cli({"run", key.str(), "-p", "2", "--", "echo", "hi"});
  EXPECT_EQ(r.status, 4) << r.err;
  EXPECT_EQ(r.out, "");
  for (const char* part : {"owned by nobody (uid 65534)", "mode 0666", "does not trust",
                           "--trust-owner nobody", "trusted_owners"})
    EXPECT_TRUE(has(r.err, part)) << part << " missing from: " << r.err;
  EXPECT_EQ(contents(path), before) << "the refused segment was written to";
  r = shmsem_cli({"run", key.str(), "-p", "2", "--trust-owner", "nobody", "--", "echo", "hi"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "hi\n");
  EXPECT_EQ(
      shmsem_cli({"run", key.str(), "--trust-owner", "no-such-user-here", "--", "true"}).status, 2);
}

TEST_F(Ownership, LsInfoAndSemtopShowOwnersAndMarkAnUntrustedSegmentWithoutWritingIt) {
  unique_key squat("squat"), mine("mine");
  ASSERT_EQ(shmsem_as("65534", {"create", squat.str(), "-p", "100", "--mode", "0666"}).status, 0);
  ASSERT_EQ(shmsem_cli({"create", mine.str(), "-p", "2", "--mode", "0640"}).status, 0);
  const std::string path = Semaphore::segment_path(squat);
  const std::string before = contents(path);

  auto r = shmsem_cli({"ls"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string squat_line = line_of(r.out, squat.str() + " ");
  EXPECT_TRUE(has(squat_line, "0/100")) << r.out;
  EXPECT_TRUE(has(squat_line, "nobody")) << r.out;
  EXPECT_TRUE(has(squat_line, "0666")) << r.out;
  EXPECT_TRUE(has(squat_line, "untrusted owner")) << r.out;
  const std::string mine_line = line_of(r.out, mine.str() + " ");
  EXPECT_TRUE(has(mine_line, "root")) << r.out;
  EXPECT_TRUE(has(mine_line, "0640")) << r.out;
  EXPECT_FALSE(has(mine_line, "untrusted")) << r.out;
  r = shmsem_cli({"ls", "--trust-owner", "nobody"});
  EXPECT_FALSE(has(line_of(r.out, squat.str() + " "), "untrusted")) << r.out;

  r = shmsem_cli({"info", squat.str()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "nobody (uid 65534)")) << r.out;
  EXPECT_TRUE(has(r.out, "mode:            0666")) << r.out;
  EXPECT_TRUE(has(r.out, "UNTRUSTED OWNER")) << r.out;
  EXPECT_TRUE(has(r.out, "capacity:        100")) << r.out;
  r = shmsem_cli({"info", squat.str(), "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["owner"]["user"], "nobody");
  EXPECT_EQ(j["owner"]["mode"], "0666");
  EXPECT_EQ(j["owner"]["trusted"], false);
  EXPECT_EQ(j["untrusted_owner"], true);

  r = run_tool({SEMTOP_BIN, "--once"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(line_of(r.out, squat.str() + " "), "untrusted owner")) << r.out;
  EXPECT_TRUE(has(line_of(r.out, squat.str() + " "), "nobody")) << r.out;
  r = run_tool({SEMTOP_BIN, "--once", "--trust-owner", "65534"});
  EXPECT_FALSE(has(line_of(r.out, squat.str() + " "), "untrusted")) << r.out;
  r = shmsem_cli({"metrics"});
  EXPECT_TRUE(has(r.out, "key=\"" + squat.str() + "\"")) << r.out;

  EXPECT_EQ(contents(path), before) << "a reading tool wrote to the squatted segment";
  // Nobody's own view: its segment, trusted; root's 0640 one, trusted but
  // not readable by nobody, still shows whose it is.
  r = shmsem_as("65534", {"ls"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(has(line_of(r.out, squat.str() + " "), "untrusted")) << r.out;
  EXPECT_TRUE(has(line_of(r.out, mine.str() + " "), "no permission")) << r.out;
  EXPECT_TRUE(has(line_of(r.out, mine.str() + " "), "owner root")) << r.out;
}

TEST_F(Ownership, AdminCommandsActOnAnotherUsersSegmentOnlyAsRootAndSayWhose) {
  unique_key key, own;
  const std::string prefix = "test." + std::to_string(::getpid()) + ".";
  ASSERT_EQ(shmsem_as("64061", {"create", key.str(), "-p", "1", "--mode", "0666"}).status, 0);
  for (const std::string cmd : {"drain", "reap", "rm"}) {
    const auto r = shmsem_as("64062", {cmd, key.str()});
    EXPECT_EQ(r.status, 4) << cmd << ": " << r.err;
    EXPECT_TRUE(has(r.err, "uid 64061")) << cmd << ": " << r.err;
    EXPECT_TRUE(has(r.err, "or root may")) << cmd << ": " << r.err;
  }
  EXPECT_EQ(shmsem_as("64062", {"resize", key.str(), "3"}).status, 4);
  auto r = shmsem_as("64062", {"gc", "--prefix", prefix});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "of other users")) << r.out;
  EXPECT_TRUE(exists(Semaphore::segment_path(key))) << "gc removed another user's segment";
  // Its owner may.
  ASSERT_EQ(shmsem_as("64061", {"create", own.str(), "-p", "1"}).status, 0);
  r = shmsem_as("64061", {"gc", "--prefix", own.str()});
  EXPECT_TRUE(has(r.out, "removed " + own.str())) << r.out;
  EXPECT_FALSE(exists(Semaphore::segment_path(own)));
  // Root may, and says whose segment it acted on.
  r = shmsem_cli({"drain", key.str()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "a segment of uid 64061")) << r.out;
  r = shmsem_cli({"resize", key.str(), "2"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "1 -> 2 (a segment of uid 64061)")) << r.out;
  r = shmsem_cli({"rm", key.str()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "removed " + key.str() + " (a segment of uid 64061)")) << r.out;
  EXPECT_FALSE(exists(Semaphore::segment_path(key)));
}

// Counts the library's split warnings; each one also goes down a pipe.
class split_counter final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit split_counter(pipe_channel& ch) : ch_(ch) {}
  int count = 0;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (std::string(msg.payload.data(), msg.payload.size()).find("removed or replaced") ==
        std::string::npos)
      return;
    ++count;
    ch_.send('w');
  }
  void flush_() override {}

 private:
  pipe_channel& ch_;
};

TEST(RmInUse, RefusesAndNamesItsUsersAndForceSplitsItWithAWarningLoggedOnce) {
  unique_key key;
  seat_holder holder(key.str(), 1, 1);
  pipe_channel attached, go, warned;
  child_process waiter([&] {
    auto sink = std::make_shared<split_counter>(warned);
    shmsem::set_logger(std::make_shared<spdlog::logger>("shmsem", sink));
    Semaphore sem = Semaphore::attach(key);
    attached.send();
    go.receive(std::chrono::minutes(5));
    // Blocked for 3 s on the removed copy: its periodic checks run all along.
    try {
      sem.acquire(1, {.wait_timeout = 3s});
      return 10;
    } catch (const shmsem::AcquisitionError& e) {
      if (e.reason() != shmsem::Reason::timeout) return 11;
    }
    if (sem.name_still_points_here() || sem.snapshot().name_still_points_here) return 12;
    return sink->count == 1 ? 0 : 20 + sink->count;
  });
  ASSERT_EQ(attached.receive(), '.');
  const std::string path = Semaphore::segment_path(key);

  auto r = shmsem_cli({"rm", key.str()});
  EXPECT_EQ(r.status, 6) << r.err;
  EXPECT_TRUE(has(r.err, "in use, not removed")) << r.err;
  EXPECT_TRUE(has(r.err, "pid " + std::to_string(holder.proc.pid()) + " (")) << r.err;
  EXPECT_TRUE(has(r.err, "holds 1 seat")) << r.err;
  EXPECT_TRUE(has(r.err, "pid " + std::to_string(waiter.pid()) + " (")) << r.err;
  EXPECT_TRUE(has(r.err, "--force")) << r.err;
  EXPECT_TRUE(exists(path));

  r = shmsem_cli({"rm", "--force", key.str()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.err, "warning")) << r.err;
  EXPECT_TRUE(has(r.err, "pid " + std::to_string(holder.proc.pid()) + " (")) << r.err;
  EXPECT_TRUE(has(r.err, "split")) << r.err;
  EXPECT_FALSE(exists(path));

  // The next opener makes a new semaphore under the name; the tools show
  // that the old copy still has users.
  Semaphore fresh = Semaphore::open(key, 1);
  r = shmsem_cli({"info", key.str()});
  EXPECT_TRUE(has(r.out, "split:")) << r.out;
  EXPECT_TRUE(has(r.out, "on a removed copy")) << r.out;
  r = run_tool({SEMTOP_BIN, "--once"});
  EXPECT_TRUE(has(line_of(r.out, key.str() + " "), "split: 2 on a removed copy")) << r.out;
  // The waiter blocks on its removed copy and says so, once.
  go.send();
  EXPECT_EQ(warned.receive(), 'w');
  EXPECT_EQ(waiter.wait(), 0) << "the waiter logged the split other than once";
  EXPECT_TRUE(holder.finish());
}

TEST(RmInUse, RemovesAnUnusedSemaphoreAndReportsAMissingOne) {
  unique_key key;
  ASSERT_EQ(shmsem_cli({"create", key.str(), "-p", "1"}).status, 0);
  auto r = shmsem_cli({"rm", key.str()});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "removed " + key.str() + "\n");
  EXPECT_EQ(shmsem_cli({"rm", key.str()}).status, 3);
  EXPECT_EQ(shmsem_cli({"rm", "--force", key.str()}).status, 3);
}

}  // namespace
