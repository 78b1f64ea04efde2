// A build without the Redis backend (SHMSEM_WITH_REDIS=OFF): a Redis URL is
// refused with an error that says why, never taken for a shared-memory key,
// and shared memory works as ever.
#include <gtest/gtest.h>
#include <shmsem/shmsem.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "test_support.hpp"

namespace shmsem {
namespace {

using test::unique_key;

void expect_refused(void (*call)(const std::string&), const std::string& url) {
  try {
    call(url);
    ADD_FAILURE() << url << " was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("SHMSEM_WITH_REDIS=OFF"), std::string::npos) << what;
    EXPECT_NE(what.find("redis://"), std::string::npos) << what;
    EXPECT_EQ(what.find("secret"), std::string::npos) << what;
  }
}

TEST(NoRedis, ARedisUrlIsRefusedByEveryCallThatTakesAKey) {
  const std::string url = "redis://user:secret@127.0.0.1:6379/jobs";
  expect_refused(
      +[](const std::string& k) { Semaphore::open(k, 1); }, url);
  expect_refused(
      +[](const std::string& k) { Semaphore::attach(k); }, url);
  expect_refused(
      +[](const std::string& k) { Semaphore::remove(k); }, url);
  expect_refused(
      +[](const std::string& k) { Semaphore::remove_if_unused(k); }, url);
  expect_refused(
      +[](const std::string& k) { Semaphore::list(k); }, url);
  expect_refused(
      +[](const std::string& k) { Semaphore::segment_path(k); }, url);
  expect_refused(
      +[](const std::string& k) { Semaphore::capabilities_of(k); }, url);
  expect_refused(
      +[](const std::string& k) { Semaphore::inspect(k); }, url);
  const auto here = Semaphore::list();
  EXPECT_EQ(std::count_if(here.begin(), here.end(),
                          [](const std::string& k) { return k.find("://") != std::string::npos; }),
            0);
}

TEST(NoRedis, SharedMemoryWorksAsEver) {
  unique_key k;
  auto s = Semaphore::open(k, 2);
  EXPECT_TRUE(s.capabilities().reads_without_io);
  auto p = s.acquire();
  EXPECT_EQ(s.used(), 1);
  p.release();
  EXPECT_EQ(s.used(), 0);
}

}  // namespace
}  // namespace shmsem
