// semtop's model (rates, reclaimed seats, sorting, filtering, unreadable
// rows) and the CLI's duration and mode syntax, on hand-made samples; plus
// sample_one() against real segments, healthy and corrupt.
#include "common.hpp"
#include "model.hpp"
#include "report.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <vector>

namespace {

using namespace std::chrono_literals;
using semtop::clock;

semtop::sample make(const std::string& key, int used, int cap, int waiters = 0,
                    std::uint64_t acquired = 0) {
  semtop::sample s;
  s.key = key;
  shmsem::Snapshot snap;
  snap.key = key;
  snap.capacity = cap;
  snap.used = used;
  snap.waiters = waiters;
  snap.utilization = cap ? static_cast<double>(used) / cap : 0.0;
  snap.stats.acquired = acquired;
  s.snap = snap;
  return s;
}

semtop::sample broken(const std::string& key, const std::string& why) {
  semtop::sample s;
  s.key = key;
  s.error = why;
  return s;
}

std::vector<std::string> keys(const std::vector<semtop::row>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(r.key);
  return out;
}

TEST(SemtopModel, RatesNeedTwoSamplesOfTheSameKey) {
  semtop::model m;
  const auto t0 = clock::now();
  m.update({make("a", 1, 4, 0, 10)}, t0);
  ASSERT_EQ(m.rows().size(), 1u);
  EXPECT_FALSE(m.rows()[0].acquire_rate.has_value());

  auto s = make("a", 1, 4, 0, 30);
  s.snap->stats.timeouts = 4;
  m.update({s}, t0 + 2s);
  ASSERT_TRUE(m.rows()[0].acquire_rate.has_value());
  EXPECT_DOUBLE_EQ(*m.rows()[0].acquire_rate, 10.0);
  EXPECT_DOUBLE_EQ(*m.rows()[0].timeout_rate, 2.0);
}

TEST(SemtopModel, CounterGoingBackwardsMeansRecreatedAndShowsNoRate) {
  semtop::model m;
  const auto t0 = clock::now();
  m.update({make("a", 1, 4, 0, 100)}, t0);
  m.update({make("a", 1, 4, 0, 3)}, t0 + 1s);
  EXPECT_FALSE(m.rows()[0].acquire_rate.has_value());
  m.update({make("a", 1, 4, 0, 5)}, t0 + 2s);
  ASSERT_TRUE(m.rows()[0].acquire_rate.has_value());
  EXPECT_DOUBLE_EQ(*m.rows()[0].acquire_rate, 2.0);
}

TEST(SemtopModel, ReclaimedInIntervalIsTheDeltaOfReclaimedSeats) {
  semtop::model m;
  const auto t0 = clock::now();
  auto a = make("a", 0, 4), b = make("b", 0, 4);
  a.snap->stats.reclaimed_seats = 5;
  b.snap->stats.reclaimed_seats = 1;
  m.update({a, b}, t0);
  EXPECT_EQ(m.sum().reclaimed_interval, 0u);
  a.snap->stats.reclaimed_seats = 8;
  b.snap->stats.reclaimed_seats = 2;
  m.update({a, b}, t0 + 1s);
  EXPECT_EQ(m.sum().reclaimed_interval, 4u);
  m.update({a, b}, t0 + 2s);
  EXPECT_EQ(m.sum().reclaimed_interval, 0u);
}

TEST(SemtopModel, TotalsAddUpReadableRowsAndCountUnreadable) {
  semtop::model m;
  m.update({make("a", 2, 4, 1), make("b", 3, 3, 5), broken("c", "corrupt: bad magic")},
           clock::now());
  const auto t = m.sum();
  EXPECT_EQ(t.semaphores, 3);
  EXPECT_EQ(t.unreadable, 1);
  EXPECT_EQ(t.used, 5);
  EXPECT_EQ(t.capacity, 7);
  EXPECT_EQ(t.waiters, 6);
}

TEST(SemtopModel, SortCyclesKeyUtilWaitersRate) {
  semtop::model m;
  const auto t0 = clock::now();
  m.update({make("a", 1, 4, 9, 0), make("b", 4, 4, 0, 0), make("c", 2, 4, 3, 0)}, t0);
  m.update({make("a", 1, 4, 9, 1), make("b", 4, 4, 0, 50), make("c", 2, 4, 3, 20)}, t0 + 1s);
  EXPECT_EQ(m.sort(), semtop::sort_key::key);
  EXPECT_EQ(keys(m.rows()), (std::vector<std::string>{"a", "b", "c"}));
  m.cycle_sort();
  EXPECT_EQ(m.sort(), semtop::sort_key::util);
  EXPECT_EQ(keys(m.rows()), (std::vector<std::string>{"b", "c", "a"}));
  m.cycle_sort();
  EXPECT_EQ(m.sort(), semtop::sort_key::waiters);
  EXPECT_EQ(keys(m.rows()), (std::vector<std::string>{"a", "c", "b"}));
  m.cycle_sort();
  EXPECT_EQ(m.sort(), semtop::sort_key::acquire_rate);
  EXPECT_EQ(keys(m.rows()), (std::vector<std::string>{"b", "c", "a"}));
  m.cycle_sort();
  EXPECT_EQ(m.sort(), semtop::sort_key::key);
}

TEST(SemtopModel, FilterKeepsKeysContainingTheSubstringAndTotalsFollow) {
  semtop::model m;
  m.update({make("tenant-1.jobs", 1, 2), make("tenant-2.jobs", 2, 2), make("global", 1, 8)},
           clock::now());
  m.set_filter("jobs");
  EXPECT_EQ(keys(m.rows()), (std::vector<std::string>{"tenant-1.jobs", "tenant-2.jobs"}));
  EXPECT_EQ(m.sum().capacity, 4);
  m.set_filter("nothing");
  EXPECT_TRUE(m.rows().empty());
  EXPECT_FALSE(m.find("global").has_value());
  m.set_filter("");
  EXPECT_EQ(m.rows().size(), 3u);
}

TEST(SemtopModel, OldestHoldIsTheAgeOfTheEarliestLease) {
  semtop::model m;
  const auto now = clock::now();
  auto s = make("a", 2, 4);
  shmsem::Holder h1, h2;
  h1.acquired_at = now - 5s;
  h2.acquired_at = now - 90s;
  s.snap->holders = {h1, h2};
  m.update({s, make("b", 0, 1)}, now);
  EXPECT_EQ(m.find("a")->oldest_hold, std::chrono::duration_cast<clock::duration>(90s));
  EXPECT_FALSE(m.find("b")->oldest_hold.has_value());
  EXPECT_EQ(semtop::cells(*m.find("a")).oldest, "1m30s");
}

TEST(SemtopModel, UnreadableRowKeepsItsReasonInTextAndJson) {
  semtop::model m;
  m.update({broken("bad", "corrupt: not a shmsem segment")}, clock::now());
  ASSERT_EQ(m.rows().size(), 1u);
  EXPECT_FALSE(m.rows()[0].ok());
  std::ostringstream out;
  semtop::print_table(out, m, "host", true);
  EXPECT_NE(out.str().find("bad"), std::string::npos);
  EXPECT_NE(out.str().find("corrupt: not a shmsem segment"), std::string::npos);
  const auto j = semtop::to_json(m, "host");
  EXPECT_EQ(j["semaphores"][0]["error"], "corrupt: not a shmsem segment");
}

TEST(SemtopModel, DescribeErrorNamesTheProblem) {
  using shmsem::errc;
  auto err = [](errc c) { return shmsem::SegmentError(make_error_code(c), "/dev/shm/x: oops"); };
  EXPECT_EQ(semtop::describe_error(err(errc::not_found)), "vanished");
  EXPECT_EQ(semtop::describe_error(err(errc::permission_denied)), "no permission");
  EXPECT_EQ(semtop::describe_error(err(errc::bad_segment)).rfind("corrupt: ", 0), 0u);
  EXPECT_EQ(semtop::describe_error(err(errc::truncated)).rfind("corrupt: ", 0), 0u);
  EXPECT_EQ(semtop::describe_error(err(errc::layout_mismatch)).rfind("incompatible: ", 0), 0u);
}

TEST(SemtopModel, FormatsAgesRatesAndBars) {
  EXPECT_EQ(semtop::format_age(std::nullopt), "-");
  EXPECT_EQ(semtop::format_age(std::chrono::duration_cast<clock::duration>(42s)), "42s");
  EXPECT_EQ(semtop::format_age(std::chrono::duration_cast<clock::duration>(3h + 5min)), "3h05m");
  EXPECT_EQ(semtop::format_rate(std::nullopt), "-");
  EXPECT_EQ(semtop::format_rate(2.25), "2.2");
  EXPECT_EQ(semtop::format_rate(120.4), "120");
  EXPECT_EQ(semtop::util_bar(0.5, 10), "[#####     ]");
  EXPECT_EQ(semtop::util_bar(1.7, 4), "[####]");
  EXPECT_EQ(semtop::util_bar(0.0, 3, false), "   ");
}

TEST(SemtopModel, PrintableEscapesControlCharactersOnly) {
  EXPECT_EQ(semtop::printable("plain.key-1"), "plain.key-1");
  EXPECT_EQ(semtop::printable("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(semtop::printable("\x1b[2J\x7f"), "\\x1b[2J\\x7f");
  EXPECT_EQ(semtop::printable("\xc3\xa9 \xe6\x97\xa5"), "\xc3\xa9 \xe6\x97\xa5");  // UTF-8 stays
  semtop::model m;
  m.update({make("two\nlines", 0, 1)}, clock::now());
  std::ostringstream out;
  semtop::print_table(out, m, "host", false);
  const std::string text = out.str();
  EXPECT_NE(text.find("two\\nlines"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
}

// C1 controls (0x80-0x9F) act as escape sequences on terminals that take
// them (0x9B is CSI), raw or encoded as U+0080-U+009F.
TEST(SemtopModel, PrintableEscapesC1ControlsRawAndEncoded) {
  EXPECT_EQ(semtop::printable("a\x9b"
                              "2Jb"),
            "a\\x9b2Jb");
  EXPECT_EQ(semtop::printable("a\x85"), "a\\x85");
  EXPECT_EQ(semtop::printable("a\xc2\x9b"
                              "2J"),
            "a\\u009b2J");
  EXPECT_EQ(semtop::printable("\xc2\x80\xc2\x9f"), "\\u0080\\u009f");
  // Neighbours that are ordinary characters stay: U+00A0, U+007E, and
  // continuation bytes in 0x80-0x9F inside a longer sequence (U+0105).
  EXPECT_EQ(semtop::printable("\xc2\xa0~\xc4\x85"), "\xc2\xa0~\xc4\x85");
  // A byte that is no part of UTF-8 cannot be shown as itself.
  EXPECT_EQ(semtop::printable("x\xff"), "x\\xff");
}

TEST(SemtopModel, SampleOneReadsARealSemaphore) {
  shmsem::test::unique_key key;
  auto sem = shmsem::Semaphore::open(key, 3);
  // The holder is another process with a name of its own, so that the
  // command column can only be right if it is read from the holder's pid.
  shmsem::test::pipe_channel ready, go;
  shmsem::test::child_process holder([&] {
    ::prctl(PR_SET_NAME, "model-holder");
    auto p = sem.acquire(2);
    ready.send();
    go.receive();
    return 0;
  });
  ASSERT_EQ(ready.receive(), '.');
  const auto s = semtop::sample_one(key.str());
  ASSERT_TRUE(s.snap.has_value()) << s.error;
  EXPECT_EQ(s.snap->capacity, 3);
  EXPECT_EQ(s.snap->used, 2);
  ASSERT_EQ(s.snap->holders.size(), 1u);
  EXPECT_EQ(s.snap->holders[0].pid, holder.pid());
  EXPECT_EQ(semtop::process_name(s.snap->holders[0].pid), "model-holder");
  go.send();
  EXPECT_EQ(holder.wait(), 0);
}

TEST(SemtopModel, SampleOneReportsACorruptSegmentInsteadOfThrowing) {
  shmsem::test::unique_key key;
  const std::string path = shmsem::Semaphore::segment_path(key);
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  std::string junk(4096, '\0');
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 37 + 11);
  ASSERT_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  ::close(fd);
  const auto s = semtop::sample_one(key.str());
  EXPECT_FALSE(s.snap.has_value());
  EXPECT_TRUE(s.error.rfind("corrupt", 0) == 0 || s.error.rfind("incompatible", 0) == 0) << s.error;
}

TEST(SemtopModel, SampleOneOfAMissingKeyIsVanished) {
  shmsem::test::unique_key key;
  EXPECT_EQ(semtop::sample_one(key.str()).error, "vanished");
}

TEST(CliSyntax, DurationsTakeSecondsAndSuffixes) {
  using shmsem_cli::parse_duration;
  EXPECT_EQ(parse_duration("500ms"), 500ms);
  EXPECT_EQ(parse_duration("10s"), 10s);
  EXPECT_EQ(parse_duration("5m"), 5min);
  EXPECT_EQ(parse_duration("1h"), 1h);
  EXPECT_EQ(parse_duration("3"), 3s);
  EXPECT_EQ(parse_duration("1.5"), 1500ms);
  EXPECT_EQ(parse_duration("0"), 0ms);
  for (const char* bad : {"", "s", "-1", "10x", "1e3", "ms5", "1.2.3", "5 m"})
    EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
}

TEST(CliSyntax, ModesAreOctalUpTo0777) {
  using shmsem_cli::parse_mode;
  EXPECT_EQ(parse_mode("0660"), 0660u);
  EXPECT_EQ(parse_mode("600"), 0600u);
  EXPECT_FALSE(parse_mode("0999").has_value());
  EXPECT_FALSE(parse_mode("1777").has_value());
  EXPECT_FALSE(parse_mode("rw").has_value());
  EXPECT_FALSE(parse_mode("").has_value());
}

}  // namespace
