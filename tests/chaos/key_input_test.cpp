// key_input_test.cpp: hostile keys. "../", "/", NUL, 10,000-byte keys,
// invalid UTF-8 and control characters each get a clear error or a safe
// file name: one component directly under /dev/shm, never "." or "..",
// at most 255 bytes, and no file is ever created anywhere else.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "shm/key.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

namespace fs = std::filesystem;

void expect_safe_path(const std::string& key) {
  const std::string path = Semaphore::segment_path(key);
  ASSERT_EQ(path.rfind("/dev/shm/", 0), 0u) << path;
  const std::string name = path.substr(9);
  EXPECT_EQ(name.find('/'), std::string::npos) << name;
  EXPECT_EQ(name.find('\0'), std::string::npos);
  EXPECT_LE(name.size(), 255u);
  EXPECT_NE(name, ".");
  EXPECT_NE(name, "..");
  for (unsigned char c : name) EXPECT_TRUE(c > 0x20 && c < 0x7f) << "byte " << int(c) << " in name";
}

// Opens `key`, checks that its file is the one under /dev/shm, removes it.
void expect_opens_safely(const std::string& key) {
  SCOPED_TRACE("key of " + std::to_string(key.size()) + " bytes");
  expect_safe_path(key);
  Semaphore::remove(key);
  {
    Semaphore sem = Semaphore::open(key, 1);
    EXPECT_EQ(sem.key(), key);
    EXPECT_TRUE(fs::is_regular_file(Semaphore::segment_path(key)));
    EXPECT_TRUE(sem.acquire().is_held());
    const auto keys = Semaphore::list();
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << "list() lost the key";
  }
  EXPECT_TRUE(Semaphore::remove(key));
}

TEST(KeyInput, PathTraversalKeysStayInDevShm) {
  const std::string tag = std::to_string(::getpid());
  const std::string escapes[] = {"../../tmp/shmsem-escape-" + tag,
                                 "/tmp/shmsem-escape-" + tag,
                                 "a/b/c",
                                 "..",
                                 ".",
                                 "./x",
                                 "x/..",
                                 "/",
                                 "//"};
  for (const auto& key : escapes) expect_opens_safely(key);
  EXPECT_FALSE(fs::exists("/tmp/shmsem-escape-" + tag));
  EXPECT_FALSE(fs::exists("/dev/tmp"));
}

TEST(KeyInput, ControlCharactersAndInvalidUtf8GetSafeNames) {
  expect_opens_safely("tab\there\nnewline\r\x01\x1f\x7f");
  expect_opens_safely("\xff\xfe\xc3\x28 invalid utf-8 \xe2\x82");
  expect_opens_safely("%2F looks escaped %00");
  expect_opens_safely(" leading and trailing spaces ");
}

TEST(KeyInput, NulEmptyAndOverlongKeysAreRefusedClearly) {
  using namespace std::string_literals;
  const std::string bad[] = {""s, "a\0b"s, std::string(10000, 'k'), std::string(256, 'x'), "\0"s};
  for (const auto& key : bad) {
    SCOPED_TRACE("key of " + std::to_string(key.size()) + " bytes");
    EXPECT_THROW(Semaphore::open(key, 1), std::invalid_argument);
    EXPECT_THROW(Semaphore::attach(key), std::invalid_argument);
    EXPECT_THROW(Semaphore::remove(key), std::invalid_argument);
    EXPECT_THROW(Semaphore::segment_path(key), std::invalid_argument);
    EXPECT_THROW(Semaphore::remove_if_unused(key), std::invalid_argument);
  }
  try {
    Semaphore::open(std::string(10000, 'k'), 1);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("10000"), std::string::npos) << e.what();
  }
}

TEST(KeyInput, LongestKeysOfEveryKindGetNamesWithin255Bytes) {
  expect_opens_safely(std::string(255, 'a'));
  expect_opens_safely(std::string(255, '/'));  // every byte escaped: hashed name
  std::string mixed;
  for (int i = 0; mixed.size() < 255; ++i) mixed += static_cast<char>(1 + i % 255);
  expect_opens_safely(mixed);
}

TEST(KeyInput, DistinctKeysNeverShareAFile) {
  const std::string a = "k/1", b = "k%2F1", c = "k_1", d = "k.1";
  const std::string names[] = {Semaphore::segment_path(a), Semaphore::segment_path(b),
                               Semaphore::segment_path(c), Semaphore::segment_path(d)};
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) EXPECT_NE(names[i], names[j]);
}

}  // namespace
}  // namespace shmsem
