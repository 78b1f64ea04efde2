// shmsem logs through the spdlog logger "shmsem", which users can route.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <shmsem/logging.hpp>
#include <shmsem/shmsem.hpp>

#include <sstream>

#include "test_support.hpp"

namespace shmsem {
namespace {

struct captured_log {
  std::ostringstream out;
  captured_log() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    auto l = std::make_shared<spdlog::logger>("shmsem", sink);
    l->set_pattern("%n %l %v");
    l->set_level(spdlog::level::trace);
    set_logger(l);
  }
  ~captured_log() { set_logger(nullptr); }
};

TEST(Logging, LostSeatIsAWarningInTheUsersSink) {
  test::unique_key k;
  captured_log log;
  auto s = Semaphore::open(k, 1);
  {
    auto p = s.acquire();
    s.force_release_all();
  }  // the destructor finds the seat lost: logged, not thrown
  const std::string text = log.out.str();
  EXPECT_NE(text.find("shmsem warning"), std::string::npos) << text;
  EXPECT_NE(text.find("force-released"), std::string::npos) << text;
  EXPECT_NE(text.find(k.str()), std::string::npos) << text;
}

TEST(Logging, HotPathLogsNothing) {
  test::unique_key k;
  auto s = Semaphore::open(k, 2);
  captured_log log;
  for (int i = 0; i < 100; ++i) {
    auto p = s.acquire();
    auto q = s.try_acquire();
  }
  EXPECT_EQ(log.out.str(), "");
}

TEST(Logging, LevelIsTheUsersToSet) {
  test::unique_key k;
  captured_log log;
  logger()->set_level(spdlog::level::off);
  auto s = Semaphore::open(k, 1);
  {
    auto p = s.acquire();
    s.force_release_all();
  }
  EXPECT_EQ(log.out.str(), "");
}

}  // namespace
}  // namespace shmsem
