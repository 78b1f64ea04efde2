// The shmsem CLI and semtop on Redis URLs, as real processes against a
// private redis-server: run, info, ls, resize, drain, reap and metrics, and
// semtop --redis in batch mode and in a terminal (the holder view shows
// hosts). Holders on a second, fake host come from SHMSEM_HOST.
#include "redis_server.hpp"
#include "test_support.hpp"
#include "tool_runner.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <nlohmann/json.hpp>

namespace {

using namespace std::chrono_literals;
using shmsem::Semaphore;
using shmsem::test::child_process;
using shmsem::test::pipe_channel;
using shmsem::test::redis_server;
using shmsem::test::run_tool;
using shmsem::test::running_tool;
using shmsem::test::tmux_session;

std::string test_key() {
  return std::string("tools.") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
}

shmsem::test::tool_result shmsem_cli(std::vector<std::string> args) {
  args.insert(args.begin(), SHMSEM_BIN);
  return run_tool(args);
}

// A process on the fake host "far-host" that holds `n` seats of `url`
// until the object goes.
struct far_holder {
  pipe_channel ready, go;
  child_process proc;
  far_holder(const std::string& url, int capacity, int n)
      : proc([this, url, capacity, n] {
          ::setenv("SHMSEM_HOST", "far-host", 1);
          auto s = Semaphore::open(url, capacity);
          auto p = s.acquire(n);
          ready.send();
          go.receive(std::chrono::minutes(5));
          return 0;
        }) {
    EXPECT_EQ(ready.receive(), '.');
  }
  ~far_holder() {
    go.send();
    proc.wait();
  }
};

TEST(RedisTools, RunHoldsTheSeatsWhileTheCommandRunsAndPassesItsStatus) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  running_tool t({SHMSEM_BIN, "run", url, "-p", "3", "-n", "2", "--", "sh", "-c",
                  "echo ready; read x; exit 7"});
  ASSERT_EQ(t.read_line(), "ready");
  auto sem = Semaphore::attach(url);
  EXPECT_EQ(sem.capacity(), 3);
  EXPECT_EQ(sem.used(), 2);
  const auto hs = sem.holders();
  ASSERT_EQ(hs.size(), 1u);
  EXPECT_EQ(hs[0].pid, t.pid());
  // Full for a weight of 2: --nonblock gives the conflict code, runs nothing.
  const auto busy = shmsem_cli({"run", url, "--nonblock", "-n", "2", "--", "true"});
  EXPECT_EQ(busy.status, 1) << busy.err;
  t.close_stdin();
  EXPECT_EQ(t.wait(), 7);
  EXPECT_EQ(sem.used(), 0);
  EXPECT_EQ(sem.stats().released, 1u);
}

TEST(RedisTools, InfoLsResizeDrainReapAndMetricsWorkOnAServer) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  far_holder far(url, 4, 3);

  auto info = shmsem_cli({"info", url});
  EXPECT_EQ(info.status, 0) << info.err;
  EXPECT_NE(info.out.find("capacity:        4"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("used:            3"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("HOST"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("far-host"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find(std::to_string(far.proc.pid())), std::string::npos) << info.out;

  const auto json = shmsem_cli({"info", url, "--json"});
  ASSERT_EQ(json.status, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["holders"].size(), 1u);
  EXPECT_EQ(j["holders"][0]["host"], "far-host");
  EXPECT_EQ(j["holders"][0]["pid"], far.proc.pid());
  EXPECT_EQ(j["holders"][0]["command"], "-") << "no local process to name";

  const auto ls = shmsem_cli({"ls", srv.server_url()});
  EXPECT_EQ(ls.status, 0) << ls.err;
  EXPECT_NE(ls.out.find(url), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("3/4"), std::string::npos) << ls.out;
  EXPECT_EQ(shmsem_cli({"ls", url}).status, 2) << "a semaphore's URL is not a server's";

  EXPECT_EQ(shmsem_cli({"resize", url, "2"}).status, 0);
  EXPECT_EQ(Semaphore::attach(url).capacity(), 2);

  const auto metrics = shmsem_cli({"metrics", srv.server_url()});
  EXPECT_EQ(metrics.status, 0) << metrics.err;
  EXPECT_NE(metrics.out.find("shmsem_permits_active{key=\"" + url + "\"} 3"), std::string::npos)
      << metrics.out;
  EXPECT_NE(metrics.out.find("shmsem_permits_capacity{key=\"" + url + "\"} 2"), std::string::npos)
      << metrics.out;

  const auto drain = shmsem_cli({"drain", url});
  EXPECT_EQ(drain.status, 0) << drain.err;
  EXPECT_NE(drain.out.find("1 live holder lease"), std::string::npos) << drain.out;
  EXPECT_EQ(Semaphore::attach(url).used(), 0);

  const auto reap = shmsem_cli({"reap", srv.server_url()});
  EXPECT_EQ(reap.status, 0) << reap.err;
  EXPECT_NE(reap.out.find(url + ": reaped 0 seats"), std::string::npos) << reap.out;
}

TEST(RedisTools, ErrorsAreClearAndShowNoPassword) {
  redis_server srv({.password = "sesame"});
  const std::string url = srv.url(test_key());
  { auto s = Semaphore::open(url, 2); }
  const auto ls = shmsem_cli({"ls", "redis+unix://:sesame@" + srv.socket_path()});
  EXPECT_EQ(ls.status, 0) << ls.err;
  EXPECT_NE(ls.out.find(test_key()), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find("sesame"), std::string::npos) << ls.out;
  const auto denied = shmsem_cli({"info", "redis+unix://:wrong@" + srv.socket_path() + "?key=k"});
  EXPECT_EQ(denied.status, 4) << denied.err;  // the semaphore cannot be used
  EXPECT_NE(denied.err.find("refused"), std::string::npos) << denied.err;
  EXPECT_EQ(denied.err.find("wrong"), std::string::npos) << denied.err;
  const auto missing = shmsem_cli({"info", srv.url("nothing.here")});
  EXPECT_EQ(missing.status, 3) << missing.err;
  const auto bad = shmsem_cli({"info", "redis://host:notaport/k"});
  EXPECT_EQ(bad.status, 2) << bad.err;
}

TEST(RedisTools, SemtopShowsARedisServersSemaphoresBesideOrInsteadOfTheHosts) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  far_holder far(url, 3, 2);
  auto once = run_tool({SEMTOP_BIN, "--once", "--no-local", "--redis", srv.server_url()});
  EXPECT_EQ(once.status, 0) << once.err;
  EXPECT_NE(once.out.find(url), std::string::npos) << once.out;
  EXPECT_NE(once.out.find("2/3"), std::string::npos) << once.out;
  EXPECT_NE(once.out.find("1 semaphore "), std::string::npos) << once.out;

  const auto json = run_tool({SEMTOP_BIN, "--json", "--no-local", "--redis", srv.server_url()});
  ASSERT_EQ(json.status, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["semaphores"].size(), 1u);
  EXPECT_EQ(j["semaphores"][0]["key"], url);
  EXPECT_EQ(j["semaphores"][0]["holders"][0]["host"], "far-host");

  const auto prom =
      run_tool({SEMTOP_BIN, "--prometheus", "--no-local", "--redis", srv.server_url()});
  EXPECT_NE(prom.out.find("shmsem_permits_active{key=\"" + url + "\"} 2"), std::string::npos)
      << prom.out;
}

TEST(RedisTools, SemtopHolderViewShowsTheHoldersHost) {
  redis_server srv;
  const std::string url = srv.url(test_key());
  far_holder far(url, 3, 2);
  tmux_session t(200, 40);
  t.type_line(std::string(SEMTOP_BIN) + " -d 0.2 --no-local --redis " + srv.server_url());
  ASSERT_TRUE(t.wait_for("2/3"));
  t.send_keys({"Enter"});
  ASSERT_TRUE(t.wait_for("holders of "));
  EXPECT_TRUE(t.wait_for("HOST"));
  EXPECT_TRUE(t.wait_for("far-host"));
  EXPECT_TRUE(t.wait_for(std::to_string(far.proc.pid())));
  EXPECT_TRUE(t.wait_for("alive"));
  t.send_keys({"q"});
}

}  // namespace
