#include <gtest/gtest.h>
#include <shmsem/shmsem.hpp>

#include <algorithm>
#include <string>

#include "shm/key.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

using detail::key_to_name;
using detail::name_to_key;

TEST(Keys, InvalidKeysThrowInvalidArgument) {
  EXPECT_THROW(Semaphore::open("", 1), std::invalid_argument);
  EXPECT_THROW(Semaphore::open(std::string("a\0b", 3), 1), std::invalid_argument);
  EXPECT_THROW(Semaphore::open(std::string(256, 'k'), 1), std::invalid_argument);
  EXPECT_THROW(Semaphore::segment_path(""), std::invalid_argument);
  EXPECT_THROW(Semaphore::remove(std::string("\0", 1)), std::invalid_argument);
}

TEST(Keys, SlashAndControlBytesAreEscapedInsideDevShm) {
  const std::string key = std::string("export:tenant/42/../x\n\x01\xff", 24);
  const std::string path = Semaphore::segment_path(key);
  EXPECT_EQ(path.rfind("/dev/shm/shmsem.", 0), 0u) << path;
  EXPECT_EQ(path.find('/', std::string("/dev/shm/").size()), std::string::npos) << path;
  EXPECT_EQ(path.find('\n'), std::string::npos);
  EXPECT_EQ(name_to_key(key_to_name(key)).value(), key);
}

TEST(Keys, NamesAreInjective) {
  // '%' itself is escaped, so a key that looks like an escape stays distinct.
  EXPECT_NE(key_to_name("a/b"), key_to_name("a%2Fb"));
  EXPECT_NE(key_to_name("a b"), key_to_name("a_b"));
  EXPECT_EQ(name_to_key(key_to_name("a%2Fb")).value(), "a%2Fb");
}

TEST(Keys, LongKeysAreHashedAndStillListed) {
  test::unique_key base("long");
  std::string key = base.str() + "." + std::string(300, '/');  // 600+ bytes escaped
  key.resize(255);
  const std::string name = key_to_name(key);
  EXPECT_LE(name.size(), 255u);
  EXPECT_TRUE(detail::is_hashed_name(name));
  EXPECT_FALSE(name_to_key(name).has_value());
  {
    auto s = Semaphore::open(key, 1);
    auto keys = Semaphore::list();
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end());
    EXPECT_EQ(s.key(), key);
  }
  EXPECT_TRUE(Semaphore::remove(key));
}

TEST(Keys, ListReturnsKeysNotFileNames) {
  test::unique_key k("with/slash");
  auto s = Semaphore::open(k, 1);
  auto keys = Semaphore::list();
  EXPECT_NE(std::find(keys.begin(), keys.end(), k.str()), keys.end());
}

TEST(Keys, RemoveReportsWhetherItExisted) {
  test::unique_key k;
  { auto s = Semaphore::open(k, 1); }
  EXPECT_TRUE(Semaphore::remove(k));
  EXPECT_FALSE(Semaphore::remove(k));
}

// What the tools print and what they pass to list(): the library says, so
// that no tool parses a URL itself.
TEST(Key, AShownKeyHasNoLoginAndAServerUrlIsToldFromASemaphores) {
  EXPECT_EQ(Semaphore::shown_key("jobs.encode"), "jobs.encode");
  EXPECT_EQ(Semaphore::shown_key("redis://h:6379/k"), "redis://h:6379/k");
  EXPECT_EQ(Semaphore::shown_key("redis://u:p@ss@h/k"), "redis://...@h/k");
  EXPECT_EQ(Semaphore::shown_key("redis+unix://:p/w@/run/r.sock?key=k"),
            "redis+unix://...@/run/r.sock?key=k");
  EXPECT_EQ(Semaphore::shown_key("redis+unix:///run/r.sock?key=k"),
            "redis+unix:///run/r.sock?key=k");
  EXPECT_FALSE(Semaphore::names_server("jobs.encode"));
  EXPECT_FALSE(Semaphore::names_server("nope://h/k"));
  try {
    Semaphore::capabilities_of("redis://h/k");
  } catch (const std::invalid_argument&) {
    GTEST_SKIP() << "a build without the Redis backend (the rest is about its URLs)";
  }
  EXPECT_TRUE(Semaphore::names_server("redis://h:6379"));
  EXPECT_TRUE(Semaphore::names_server("redis://u:pw@h:6379/"));
  EXPECT_TRUE(Semaphore::names_server("redis+unix:///run/r.sock"));
  EXPECT_FALSE(Semaphore::names_server("redis://h:6379/jobs"));
  EXPECT_FALSE(Semaphore::names_server("redis+unix:///run/r.sock?key=jobs"));
  EXPECT_FALSE(Semaphore::names_server("redis://h:notaport"));
}

}  // namespace
}  // namespace shmsem
