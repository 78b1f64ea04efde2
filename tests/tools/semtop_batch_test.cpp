// semtop's batch modes, run as a real process: --once, -n, --json (parsed
// back) and --prometheus, against semaphores held by another process.
#include "seat_holder.hpp"
#include "test_support.hpp"
#include "tool_runner.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <sstream>

namespace {

using namespace std::chrono_literals;
using shmsem::Semaphore;
using shmsem::test::child_process;
using shmsem::test::pipe_channel;
using shmsem::test::run_tool;
using shmsem::test::seat_holder;
using shmsem::test::tool_result;
using shmsem::test::unique_key;

tool_result semtop(std::vector<std::string> args) {
  args.insert(args.begin(), SEMTOP_BIN);
  return run_tool(args);
}

std::string line_of(const std::string& text, const std::string& start) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(start, 0) == 0) return l;
  return {};
}

// The cell of `row` in the column titled `title` of `table`: the figures
// are right-aligned under their titles, so the cell ends where the title
// ends and begins after the last space before that.
std::string cell_under(const std::string& table, const std::string& row, const std::string& title) {
  const std::string header = line_of(table, "KEY ");
  const auto at = header.find(" " + title);
  if (at == std::string::npos) return "<no column " + title + ">";
  const auto end = at + 1 + title.size();
  if (row.size() < end || (row.size() > end && row[end] != ' ')) return "<misaligned>";
  const auto space = row.rfind(' ', end - 1);
  return space == std::string::npos ? row.substr(0, end) : row.substr(space + 1, end - space - 1);
}

TEST(SemtopBatch, OnceShowsASemaphoreHeldByAnotherProcess) {
  unique_key key;
  seat_holder h(key.str(), 3, 2);
  const auto r = semtop({"--once", "--filter", key.str()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("1 semaphore"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("seats 2/3 used"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("USED/CAP"), std::string::npos) << r.out;
  const auto row = line_of(r.out, key.str() + " ");
  EXPECT_NE(row.find("2/3"), std::string::npos) << r.out;
  EXPECT_NE(row.find("67%"), std::string::npos) << r.out;
}

TEST(SemtopBatch, OnceShowsACorruptSegmentAsARowAndGoesOn) {
  unique_key good("good"), bad("bad");
  auto sem = Semaphore::open(good, 2);
  const int fd = ::open(Semaphore::segment_path(bad).c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  const std::string junk(4096, '\x5a');
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), 4096);
  ::close(fd);
  const auto r = semtop({"--once", "--filter", "test." + std::to_string(::getpid()) + "."});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(line_of(r.out, bad.str() + " ").find("corrupt"), std::string::npos) << r.out;
  EXPECT_NE(line_of(r.out, good.str() + " ").find("0/2"), std::string::npos) << r.out;
}

TEST(SemtopBatch, IterationsPrintTheTableNTimesWithRatesAfterTheFirst) {
  unique_key key;
  auto sem = Semaphore::open(key, 2);
  const auto r = semtop({"-n", "2", "-d", "0.2", "--filter", key.str()});
  ASSERT_EQ(r.status, 0) << r.err;
  std::size_t headers = 0;
  for (auto pos = r.out.find("semtop - "); pos != std::string::npos;
       pos = r.out.find("semtop - ", pos + 1))
    ++headers;
  EXPECT_EQ(headers, 2u) << r.out;
  // The second table has a measured rate (0.0), the first only "-".
  const auto at = r.out.rfind("semtop - ");
  const auto first = r.out.substr(0, at), second = r.out.substr(at);
  EXPECT_EQ(cell_under(first, line_of(first, key.str() + " "), "ACQ/s"), "-") << r.out;
  EXPECT_EQ(cell_under(second, line_of(second, key.str() + " "), "ACQ/s"), "0.0") << r.out;
}

TEST(SemtopBatch, JsonParsesBackWithStatsAndHolders) {
  unique_key key;
  seat_holder h(key.str(), 4, 3);
  const auto r = semtop({"--json", "--filter", key.str()});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["host"].get<std::string>().empty());
  ASSERT_EQ(j["semaphores"].size(), 1u) << r.out;
  const auto& s = j["semaphores"][0];
  EXPECT_EQ(s["key"], key.str());
  EXPECT_EQ(s["capacity"], 4);
  EXPECT_EQ(s["used"], 3);
  EXPECT_EQ(s["waiters"], 0);
  EXPECT_EQ(s["stats"]["acquired"], 1);
  EXPECT_EQ(s["stats"]["wait"]["counts"].size(), shmsem::Histogram::kBounds.size() + 1);
  ASSERT_EQ(s["holders"].size(), 1u);
  EXPECT_EQ(s["holders"][0]["pid"], h.proc.pid());
  EXPECT_EQ(s["holders"][0]["weight"], 3);
  EXPECT_EQ(s["holders"][0]["state"], "alive");
  EXPECT_TRUE(s["holders"][0]["ttl_left_seconds"].is_null());
}

TEST(SemtopBatch, PrometheusPrintsTheExposition) {
  unique_key key;
  seat_holder h(key.str(), 5, 2);
  const auto r = semtop({"--prometheus"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("# TYPE shmsem_permits_capacity gauge"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shmsem_permits_capacity{key=\"" + key.str() + "\"} 5"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("shmsem_permits_active{key=\"" + key.str() + "\"} 2"), std::string::npos)
      << r.out;
}

TEST(SemtopBatch, BadOptionsExitTwoAndNameTheOption) {
  const auto unknown = semtop({"--once", "--no-such-option"});
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.err.find("--no-such-option"), std::string::npos) << unknown.err;
  const auto bad_value = semtop({"--once", "--sort", "sideways"});
  EXPECT_EQ(bad_value.status, 2);
  EXPECT_NE(bad_value.err.find("sideways"), std::string::npos) << bad_value.err;
  const auto help = semtop({"--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--sort"), std::string::npos) << help.out;
}

TEST(SemtopBatch, WithoutATerminalTheInteractiveModeFailsCleanly) {
  const auto r = semtop({});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("needs a terminal"), std::string::npos) << r.err;
}

}  // namespace
