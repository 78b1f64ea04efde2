// special_files_test.cpp: what is found at a segment's path is not always a
// segment. A symlink is refused (O_NOFOLLOW) and its target left untouched;
// a FIFO or a directory is refused without hanging; a file that is not a
// segment, a truncated one and one holding another key are refused with a
// SegmentError that names the path. Each case runs in a child with a time
// limit, so a hang fails the test instead of stalling the suite.
#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "fault_util.hpp"
#include "shm/layout.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using namespace std::chrono_literals;

// Every way in must fail with SegmentError (carrying `code` if given), fast.
void expect_refused(const std::string& key, std::optional<errc> code) {
  test::child_process c([&] {
    for (int i = 0; i < 2; ++i) {
      try {
        if (i == 0)
          Semaphore::open(key, 1);
        else
          Semaphore::attach(key);
        ADD_FAILURE() << (i ? "attach" : "open") << " accepted it";
      } catch (const SegmentError& e) {
        if (code) {
          EXPECT_EQ(e.code(), *code) << e.what();
        }
        EXPECT_NE(std::string(e.what()).find(Semaphore::segment_path(key)), std::string::npos)
            << "the message must name the path: " << e.what();
      }
    }
    (void)Semaphore::list();  // must skip it, not block on it
    try {
      (void)Semaphore::remove_if_unused(key);  // must not block on it either
    } catch (const SegmentError&) {
    }
    return 0;
  });
  EXPECT_EQ(c.wait(10s), 0);
}

TEST(SpecialFiles, SymlinkIsRefusedAndItsTargetUntouched) {
  test::unique_key key;
  const std::string target = "/tmp/shmsem-symlink-target-" + std::to_string(::getpid());
  { std::ofstream(target) << "precious"; }
  ASSERT_EQ(::symlink(target.c_str(), Semaphore::segment_path(key).c_str()), 0);
  expect_refused(key.str(), errc::bad_segment);
  std::stringstream s;
  s << std::ifstream(target).rdbuf();
  EXPECT_EQ(s.str(), "precious");
  ::unlink(target.c_str());
}

TEST(SpecialFiles, FifoIsRefusedWithoutHanging) {
  test::unique_key key;
  ASSERT_EQ(::mkfifo(Semaphore::segment_path(key).c_str(), 0600), 0);
  expect_refused(key.str(), errc::bad_segment);
}

TEST(SpecialFiles, DirectoryIsRefused) {
  test::unique_key key;
  ASSERT_EQ(::mkdir(Semaphore::segment_path(key).c_str(), 0700), 0);
  // glibc's shm_open reports a directory as EINVAL (not EISDIR), so the
  // error carries system:EINVAL; what matters is that it is refused.
  expect_refused(key.str(), std::nullopt);
  ::rmdir(Semaphore::segment_path(key).c_str());
}

void write_file(const std::string& path, const void* data, std::size_t n, off_t size) {
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, data, n), static_cast<ssize_t>(n));
  ASSERT_EQ(::ftruncate(fd, size), 0);
  ::close(fd);
}

TEST(SpecialFiles, ForeignFileIsRefusedAsNotASegment) {
  test::unique_key key;
  const char junk[] = "this is not a semaphore, it is somebody's data";
  write_file(Semaphore::segment_path(key), junk, sizeof junk, 1 << 20);
  expect_refused(key.str(), errc::bad_segment);
}

// A valid segment image of `src` with one thing changed by `patch`.
template <class F>
void corrupt_copy(const std::string& src, const std::string& dst, off_t size, F patch) {
  std::vector<char> page(detail::layout::kHeaderRegion);
  int fd = ::open(Semaphore::segment_path(src).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, page.data(), page.size(), 0), static_cast<ssize_t>(page.size()));
  struct stat st;
  ::fstat(fd, &st);
  ::close(fd);
  patch(*detail::layout::header(page.data()));
  write_file(Semaphore::segment_path(dst), page.data(), page.size(), size ? size : st.st_size);
}

TEST(SpecialFiles, TruncatedSegmentIsRefused) {
  test::unique_key src, key;
  Semaphore::open(src, 4);
  corrupt_copy(src.str(), key.str(), detail::layout::kHeaderRegion, [&](auto& h) {
    h.key_size = static_cast<std::uint32_t>(key.str().size());
    std::memcpy(h.key, key.c_str(), key.str().size() + 1);
  });
  expect_refused(key.str(), errc::truncated);
}

TEST(SpecialFiles, SegmentOfAnotherKeyIsRefused) {
  test::unique_key src, key;
  Semaphore::open(src, 4);
  corrupt_copy(src.str(), key.str(), 0, [](auto&) {});
  expect_refused(key.str(), errc::bad_segment);
}

TEST(SpecialFiles, SegmentOfAnotherLayoutIsRefused) {
  test::unique_key src, key;
  Semaphore::open(src, 4);
  corrupt_copy(src.str(), key.str(), 0, [](auto& h) { h.layout_version += 1; });
  expect_refused(key.str(), errc::layout_mismatch);
}

TEST(SpecialFiles, OutOfRangeHeaderFieldIsRefused) {
  test::unique_key src, key;
  Semaphore::open(src, 4);
  corrupt_copy(src.str(), key.str(), 0, [&](auto& h) {
    h.key_size = static_cast<std::uint32_t>(key.str().size());
    std::memcpy(h.key, key.c_str(), key.str().size() + 1);
    h.gate.store(detail::layout::make_gate(0, 0, 0));
  });
  expect_refused(key.str(), errc::bad_segment);
}

}  // namespace
}  // namespace shmsem
