// token_sweep_test.cpp: token files in which no token is held may be
// removed at any time (docs/design.md, "Liveness"): a token taken in a file
// swept meanwhile is taken again where the others look, a free token is
// believed only in the file at the name, a file with a token held is never
// swept, and the files a removed semaphore's users left behind are swept.
//
// Two token_files objects stand for two processes: OFD locks belong to
// open file descriptions, and each object opens its own.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "shm/tokens.hpp"
#include "sys/shm.hpp"
#include "test_support.hpp"
#include "tool_runner.hpp"

namespace shmsem {
namespace {

using detail::token_files;

// The token files of a made-up segment of this test's own, removed at the end.
struct test_segment {
  std::uint64_t nonce = std::random_device{}() * 0x100000001ULL ^ static_cast<unsigned>(::getpid());
  std::uint64_t secret = 0x5ec2e7ULL ^ nonce;
  token_files user() const {
    return token_files("token-sweep-test", "(none)", nonce, secret, 0600, ::getuid(), ::getgid());
  }
  std::string name(std::uint32_t file = 0) const { return detail::token_file_name(nonce, file); }
  std::string path(std::uint32_t file = 0) const { return sys::shm_path(name(file)); }
  ~test_segment() {
    for (std::uint32_t f = 0; f < 2; ++f) (void)sys::shm_remove(name(f));
  }
};

TEST(TokenSweep, ATokenTakenInASweptFileIsTakenAgainWhereOthersLook) {
  test_segment seg;
  token_files holder = seg.user(), prober = seg.user();
  ASSERT_TRUE(holder.take(3));
  holder.give_back(3);  // the holder keeps the file open, with no token in it
  ASSERT_TRUE(token_files::sweep(seg.name()));
  EXPECT_FALSE(std::filesystem::exists(seg.path()));

  // Locked in the file it had open, the token would be in a file nobody
  // can find: the prober would judge a live holder dead.
  ASSERT_TRUE(holder.take(3));
  EXPECT_TRUE(std::filesystem::exists(seg.path()));
  EXPECT_TRUE(prober.held_by_other(3));
  EXPECT_TRUE(prober.any_held_by_other(128));
  EXPECT_FALSE(prober.held_by_other(4));
  holder.give_back(3);
  EXPECT_FALSE(prober.held_by_other(3));
}

TEST(TokenSweep, AFreeTokenIsBelievedOnlyInTheFileAtTheName) {
  test_segment seg;
  token_files holder = seg.user(), prober = seg.user(), opener = seg.user();
  ASSERT_TRUE(holder.take(3));
  // Both have the first file open now.
  ASSERT_TRUE(prober.held_by_other(3));
  ASSERT_TRUE(opener.any_held_by_other(128));
  holder.give_back(3);
  ASSERT_TRUE(token_files::sweep(seg.name()));

  // The holder takes its token again, in a file made again at the name.
  // Asked in the swept file they still have open, both would find it free.
  token_files next_holder = seg.user();
  ASSERT_TRUE(next_holder.take(3));
  EXPECT_TRUE(prober.held_by_other(3));
  EXPECT_TRUE(opener.any_held_by_other(128));
  next_holder.give_back(3);
  EXPECT_FALSE(prober.held_by_other(3));
  EXPECT_FALSE(opener.any_held_by_other(128));
}

TEST(TokenSweep, AFileWithATokenHeldIsNeverSwept) {
  test_segment seg;
  token_files holder = seg.user(), other = seg.user();
  ASSERT_TRUE(holder.take(130));  // the second file
  ASSERT_TRUE(other.take(5));     // the first
  EXPECT_FALSE(token_files::sweep(seg.name(1)));
  EXPECT_FALSE(token_files::sweep(seg.name(0)));
  other.give_back(5);
  token_files::sweep_all(seg.nonce, 256);
  EXPECT_FALSE(std::filesystem::exists(seg.path(0)));
  EXPECT_TRUE(std::filesystem::exists(seg.path(1)));
  EXPECT_TRUE(other.held_by_other(130));
  holder.give_back(130);
  EXPECT_TRUE(token_files::sweep(seg.name(1)));
  EXPECT_FALSE(token_files::sweep(seg.name(1)));  // gone already
}

bool listed(const std::vector<std::string>& paths, const std::string& path) {
  return std::find(paths.begin(), paths.end(), path) != paths.end();
}

// The path a child process that opens `key`, takes a seat and sends the
// path of its token file, then waits for a byte on `down`, took its token in.
std::string token_path_of_child(test::pipe_channel& up) {
  std::string path;
  for (char c = up.receive(); c != '\n'; c = up.receive()) path += c;
  return path;
}

void send_token_path(test::pipe_channel& up, const Semaphore& sem) {
  for (char c : test::token_file_of(sem)) up.send(c);
  up.send('\n');
}

// A user of a semaphore removed while it holds a seat exits without
// letting go (`_exit`, as a forked child does): its token file stays, and
// is swept once no token is held in it. A live semaphore's token file in
// which no token is held is no orphan. One test: the other cases of this
// binary run beside it under ctest -j2, and a real sweep of theirs would
// take its orphan first.
TEST(TokenSweep, TheTokenFilesARemovedSemaphoresUsersLeftAreSwept) {
  test::unique_key key, live("live");
  test::pipe_channel up, down, live_up;
  test::child_process user([&] {
    Semaphore sem = Semaphore::open(key, 2);
    Permit p = sem.acquire();
    send_token_path(up, sem);
    down.receive();
    ::_exit(0);  // no detach
    return 1;
  });
  const std::string token_path = token_path_of_child(up);
  ASSERT_EQ(token_path.rfind("/dev/shm/shmsem-tokens.", 0), 0u) << token_path;
  // A user of `live` that takes a seat, gives it back and lets go: its
  // token file stays, with no token held, beside a segment that does.
  test::child_process live_user([&] {
    Semaphore sem = Semaphore::open(live, 1);
    sem.acquire().release();
    send_token_path(live_up, sem);
    return 0;
  });
  const std::string live_path = token_path_of_child(live_up);
  EXPECT_EQ(live_user.wait(), 0);
  ASSERT_EQ(live_path.rfind("/dev/shm/shmsem-tokens.", 0), 0u) << live_path;

  EXPECT_TRUE(Semaphore::remove(key));
  EXPECT_TRUE(std::filesystem::exists(token_path)) << "its user still holds a token there";
  EXPECT_FALSE(listed(Semaphore::remove_orphaned_token_files(true), token_path));
  EXPECT_FALSE(listed(Semaphore::remove_orphaned_token_files(), token_path));
  EXPECT_TRUE(std::filesystem::exists(token_path));

  down.send();
  EXPECT_EQ(user.wait(), 0);
  EXPECT_TRUE(std::filesystem::exists(token_path)) << "nobody let go of the removed segment";
  // `shmsem gc --dry-run` lists it (without a prefix: a real gc would
  // remove the unused semaphores of the tests that run beside this one).
  const auto r = test::run_tool({SHMSEM_BIN, "gc", "--dry-run"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("would remove " + token_path + "\n"), std::string::npos) << r.out;
  EXPECT_TRUE(listed(Semaphore::remove_orphaned_token_files(true), token_path));
  EXPECT_TRUE(std::filesystem::exists(token_path));
  // `shmsem gc --token-files` sweeps them and removes no semaphore.
  const auto swept = test::run_tool({SHMSEM_BIN, "gc", "--token-files"});
  EXPECT_EQ(swept.status, 0) << swept.err;
  EXPECT_NE(swept.out.find("removed " + token_path + "\n"), std::string::npos) << swept.out;
  EXPECT_FALSE(std::filesystem::exists(token_path));
  EXPECT_EQ(swept.out.find(live_path), std::string::npos) << swept.out;
  EXPECT_TRUE(std::filesystem::exists(live_path));
  EXPECT_TRUE(std::filesystem::exists(Semaphore::segment_path(live)));
  EXPECT_FALSE(listed(Semaphore::remove_orphaned_token_files(), live_path));
  EXPECT_TRUE(std::filesystem::exists(live_path));
  // Removed with nobody attached, `live` takes its token files with it.
  EXPECT_TRUE(Semaphore::remove(live));
  EXPECT_FALSE(std::filesystem::exists(live_path));
}

}  // namespace
}  // namespace shmsem
