// metrics_test.cpp: the Prometheus exposition, parsed back by a strict
// reader of text format 0.0.4 written here, and the textfile writer.
#include <shmsem/shmsem.hpp>

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "service_test_util.hpp"
#include "test_support.hpp"

// Designated initializers that name only some fields are the documented
// style of these options; GCC 12 warns about the fields left out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace shmsem {
namespace {

using test::unique_key;

// A strict reader of the text format: it rejects what Prometheus rejects
// (bad names, unknown escapes, raw newlines in values, a family split in
// two, samples before their TYPE, a histogram without +Inf) and returns
// every sample with its labels unescaped.
struct sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct exposition {
  std::vector<sample> samples;
  std::map<std::string, std::string> types;
  std::vector<std::string> errors;

  std::vector<const sample*> find(const std::string& name,
                                  const std::map<std::string, std::string>& want) const {
    std::vector<const sample*> out;
    for (const auto& s : samples) {
      if (s.name != name) continue;
      bool ok = true;
      for (const auto& [k, v] : want)
        if (auto it = s.labels.find(k); it == s.labels.end() || it->second != v) ok = false;
      if (ok) out.push_back(&s);
    }
    return out;
  }
  // The value of the one sample that matches, or NaN (and a failure).
  double value(const std::string& name, const std::map<std::string, std::string>& want) const {
    auto found = find(name, want);
    EXPECT_EQ(found.size(), 1u) << name;
    return found.size() == 1 ? found[0]->value : std::nan("");
  }
};

bool name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

exposition parse(const std::string& text) {
  exposition ex;
  std::set<std::string> closed;  // families already finished
  std::string current;
  auto family_of = [&](const std::string& name) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        const std::string base = name.substr(0, name.size() - s.size());
        if (auto it = ex.types.find(base); it != ex.types.end() && it->second == "histogram")
          return base;
      }
    }
    return name;
  };
  if (text.empty() || text.back() != '\n') ex.errors.push_back("missing final newline");
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    auto err = [&](const std::string& what) {
      ex.errors.push_back("line " + std::to_string(n) + ": " + what + ": " + line);
    };
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      if (ex.types.count(name)) err("second TYPE");
      ex.types[name] = type;
      if (!current.empty() && current != name) closed.insert(current);
      current = name;
      continue;
    }
    if (!line.empty() && line[0] == '#') continue;
    std::size_t i = 0;
    sample s;
    while (i < line.size() && name_char(line[i], i == 0)) s.name += line[i++];
    if (s.name.empty()) {
      err("bad metric name");
      continue;
    }
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::string lname, lvalue;
        while (i < line.size() && name_char(line[i], lname.empty())) lname += line[i++];
        if (lname.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
          err("bad label");
          break;
        }
        i += 2;
        bool closed_quote = false;
        while (i < line.size()) {
          const char c = line[i++];
          if (c == '"') {
            closed_quote = true;
            break;
          }
          if (c != '\\') {
            lvalue += c;
            continue;
          }
          if (i >= line.size()) break;
          const char e = line[i++];
          if (e == '\\')
            lvalue += '\\';
          else if (e == '"')
            lvalue += '"';
          else if (e == 'n')
            lvalue += '\n';
          else
            err("invalid escape");
        }
        if (!closed_quote) {
          err("unterminated label value");
          break;
        }
        if (s.labels.count(lname)) err("duplicate label");
        s.labels[lname] = lvalue;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size() || line[i] != '}') {
        err("unterminated label set");
        continue;
      }
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') {
      err("no value");
      continue;
    }
    const std::string v = line.substr(i + 1);
    if (v == "+Inf") {
      s.value = HUGE_VAL;
    } else if (v == "-Inf") {
      s.value = -HUGE_VAL;
    } else {
      char* end = nullptr;
      s.value = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') err("bad value");
    }
    const std::string fam = family_of(s.name);
    if (!ex.types.count(fam)) err("sample before its TYPE");
    if (closed.count(fam)) err("family split in two");
    ex.samples.push_back(std::move(s));
  }
  // Histograms: buckets cumulative, +Inf present and equal to _count.
  for (const auto& [fam, type] : ex.types) {
    if (type != "histogram") continue;
    std::map<std::string, std::vector<std::pair<std::string, double>>> buckets;
    for (const auto& s : ex.samples)
      if (s.name == fam + "_bucket")
        buckets[s.labels.at("key")].emplace_back(s.labels.at("le"), s.value);
    for (const auto& [key, bs] : buckets) {
      double prev = 0;
      for (const auto& [le, v] : bs) {
        if (v < prev) ex.errors.push_back(fam + ": buckets not cumulative for " + key);
        prev = v;
      }
      if (bs.empty() || bs.back().first != "+Inf") ex.errors.push_back(fam + ": no +Inf bucket");
      auto count = ex.find(fam + "_count", {{"key", key}});
      if (count.size() != 1 || count[0]->value != bs.back().second)
        ex.errors.push_back(fam + ": _count differs from +Inf for " + key);
    }
  }
  return ex;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

TEST(Metrics, ReaderRejectsWhatPrometheusRejects) {
  EXPECT_FALSE(parse("# TYPE a gauge\na{key=\"x\\qy\"} 1\n").errors.empty());
  EXPECT_FALSE(parse("# TYPE a gauge\na{key=\"x\ny\"} 1\n").errors.empty());
  EXPECT_FALSE(parse("a 1\n").errors.empty());
  EXPECT_FALSE(parse("# TYPE a gauge\n# TYPE b gauge\nb 1\na 2\n").errors.empty());
  EXPECT_TRUE(parse("# TYPE a gauge\na{key=\"x\\\\y\\\"\\n\"} 1\n").errors.empty());
}

TEST(Metrics, ReportsOneSemaphoresFiguresExactly) {
  unique_key key;
  Semaphore sem = Semaphore::open(key, 3);
  Permit a = sem.acquire();
  Permit b = sem.acquire();
  b.release();
  EXPECT_FALSE(sem.try_acquire(3).has_value());

  const exposition ex = parse(metrics_text());
  ASSERT_TRUE(ex.errors.empty()) << joined(ex.errors);
  const std::string k = key.str();
  EXPECT_EQ(ex.value("shmsem_permits_active", {{"key", k}}), 1);
  EXPECT_EQ(ex.value("shmsem_permits_capacity", {{"key", k}}), 3);
  EXPECT_EQ(ex.value("shmsem_waiters", {{"key", k}}), 0);
  EXPECT_EQ(ex.value("shmsem_acquisitions_total", {{"key", k}, {"status", "acquired"}}), 2);
  EXPECT_EQ(ex.value("shmsem_acquisitions_total", {{"key", k}, {"status", "unavailable"}}), 1);
  EXPECT_EQ(ex.value("shmsem_acquisitions_total", {{"key", k}, {"status", "timeout"}}), 0);
  EXPECT_EQ(ex.value("shmsem_wait_duration_seconds_count", {{"key", k}}), 2);
  EXPECT_EQ(ex.value("shmsem_hold_duration_seconds_count", {{"key", k}}), 1);
  EXPECT_EQ(ex.value("shmsem_hold_duration_seconds_bucket", {{"key", k}, {"le", "+Inf"}}), 1);
  EXPECT_EQ(ex.value("shmsem_reclaimed_total", {{"key", k}, {"cause", "force_released"}}), 0);
  EXPECT_EQ(ex.value("shmsem_recoveries_total", {{"key", k}}), 0);
  EXPECT_EQ(ex.find("shmsem_wait_duration_seconds_bucket", {{"key", k}}).size(), 13u);

  EXPECT_EQ(sem.force_release_all(), 1);
  const exposition after = parse(metrics_text());
  EXPECT_EQ(after.value("shmsem_reclaimed_total", {{"key", k}, {"cause", "force_released"}}), 1);
  EXPECT_EQ(after.value("shmsem_permits_active", {{"key", k}}), 0);
  EXPECT_THROW(a.release(), PermitNotHeldError);
}

TEST(Metrics, KeysFullOfSpecialCharactersRoundTrip) {
  unique_key base;
  const std::vector<std::string> keys = {
      base.str() + " q\"uote",       base.str() + " back\\slash\\",
      base.str() + " new\nline\n",   base.str() + " {brace}=,le=\"+Inf\"",
      base.str() + " tab\tcr\r",     base.str() + " \xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC",
      base.str() + " \\n\\\"literal"};
  test::key_remover cleanup(keys);
  std::vector<Semaphore> open;
  for (std::size_t i = 0; i < keys.size(); ++i)
    open.push_back(Semaphore::open(keys[i], static_cast<int>(i) + 1));

  const std::string text = metrics_text();
  const exposition ex = parse(text);
  ASSERT_TRUE(ex.errors.empty()) << joined(ex.errors);
  for (std::size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(ex.value("shmsem_permits_capacity", {{"key", keys[i]}}), static_cast<double>(i + 1))
        << keys[i];
}

TEST(Metrics, HistogramBucketsBecomeCumulative) {
  Snapshot s;
  s.key = "h";
  s.stats.hold.counts = {1, 2, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 3};
  s.stats.hold.sum_seconds = 1.5;
  const exposition ex = parse(metrics_text({s}));
  ASSERT_TRUE(ex.errors.empty()) << joined(ex.errors);
  auto bucket = [&](const char* le) {
    return ex.value("shmsem_hold_duration_seconds_bucket", {{"key", "h"}, {"le", le}});
  };
  EXPECT_EQ(bucket("0.0001"), 1);
  EXPECT_EQ(bucket("0.001"), 3);
  EXPECT_EQ(bucket("0.05"), 3);
  EXPECT_EQ(bucket("0.1"), 7);
  EXPECT_EQ(bucket("300"), 7);
  EXPECT_EQ(bucket("+Inf"), 10);
  EXPECT_EQ(ex.value("shmsem_hold_duration_seconds_count", {{"key", "h"}}), 10);
  EXPECT_EQ(ex.value("shmsem_hold_duration_seconds_sum", {{"key", "h"}}), 1.5);
  EXPECT_EQ(ex.value("shmsem_wait_duration_seconds_count", {{"key", "h"}}), 0);
}

bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const std::size_t len = b < 0x80         ? 1
                            : (b >> 5) == 6  ? 2
                            : (b >> 4) == 14 ? 3
                            : (b >> 3) == 30 ? 4
                                             : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

// Each segment is its own series: keys that differ only in bytes that are
// not UTF-8 (or in a literal U+FFFD) still get label values of their own.
TEST(Metrics, KeysThatDifferOnlyInInvalidUtf8GetDistinctLabels) {
  std::vector<Snapshot> snaps(5);
  snaps[0].key = "k\xFF";
  snaps[1].key = "k\xFE";
  snaps[2].key = "k\xEF\xBF\xBD";  // a literal U+FFFD
  snaps[3].key =
      "k\xEF\xBF\xBD"
      "FF";  // U+FFFD followed by "FF"
  snaps[4].key = "ok";
  for (std::size_t i = 0; i < snaps.size(); ++i) snaps[i].capacity = static_cast<int>(i) + 1;
  const exposition ex = parse(metrics_text(snaps, 0));
  ASSERT_TRUE(ex.errors.empty()) << joined(ex.errors);
  EXPECT_EQ(ex.value("shmsem_scrape_skipped_segments", {}), 0);
  const auto series = ex.find("shmsem_permits_capacity", {});
  ASSERT_EQ(series.size(), snaps.size());
  std::set<std::string> labels;
  std::set<double> capacities;
  for (const auto* s : series) {
    const std::string& label = s->labels.at("key");
    EXPECT_TRUE(valid_utf8(label)) << label;
    labels.insert(label);
    capacities.insert(s->value);
  }
  EXPECT_EQ(labels.size(), snaps.size());
  EXPECT_EQ(capacities.size(), snaps.size());
  EXPECT_EQ(ex.value("shmsem_permits_capacity", {{"key", "ok"}}), 5);
}

double realtime_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Counters restart at 0 when a key is removed and created again (as gc
// does). The creation time tells every incarnation apart, so increase()
// and rate() can see the reset even when the new counter has already
// passed the old value.
TEST(Metrics, CreationTimeMarksEachIncarnationOfAKey) {
  unique_key key;
  const std::string k = key.str();
  const double before = realtime_seconds();
  Semaphore::open(key, 2).acquire().release();
  const double after = realtime_seconds();
  const exposition first = parse(metrics_text());
  ASSERT_TRUE(first.errors.empty()) << joined(first.errors);
  EXPECT_EQ(first.types.count("shmsem_created_timestamp_seconds")
                ? first.types.at("shmsem_created_timestamp_seconds")
                : "",
            "gauge");
  const double created = first.value("shmsem_created_timestamp_seconds", {{"key", k}});
  EXPECT_GE(created, before - 1);
  EXPECT_LE(created, after + 1);

  ASSERT_TRUE(Semaphore::remove(key));
  Semaphore again = Semaphore::open(key, 2);
  for (int i = 0; i < 3; ++i) again.acquire().release();
  const exposition second = parse(metrics_text());
  EXPECT_EQ(second.value("shmsem_acquisitions_total", {{"key", k}, {"status", "acquired"}}), 3);
  EXPECT_GT(second.value("shmsem_created_timestamp_seconds", {{"key", k}}), created);
}

TEST(Metrics, UnreadableSegmentIsSkippedAndCounted) {
  unique_key good("good"), bad("bad");
  Semaphore sem = Semaphore::open(good, 2);
  {
    // A listed name whose content is not a segment.
    std::ofstream f(Semaphore::segment_path(bad));
    f << "this is not a shmsem segment";
  }
  std::string text;
  ASSERT_NO_THROW(text = metrics_text());
  const exposition ex = parse(text);
  ASSERT_TRUE(ex.errors.empty()) << joined(ex.errors);
  EXPECT_EQ(ex.value("shmsem_permits_capacity", {{"key", good.str()}}), 2);
  EXPECT_TRUE(ex.find("shmsem_permits_capacity", {{"key", bad.str()}}).empty());
  EXPECT_GE(ex.value("shmsem_scrape_skipped_segments", {}), 1);
}

struct temp_dir {
  temp_dir() {
    char tmpl[] = "/tmp/shmsem-metrics-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp");
    path = tmpl;
  }
  ~temp_dir() {
    for (const auto& e : entries()) ::unlink((path + "/" + e).c_str());
    ::rmdir(path.c_str());
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(path.c_str())) {
      while (dirent* e = ::readdir(d))
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..")
          out.push_back(e->d_name);
      ::closedir(d);
    }
    return out;
  }
  std::string path;
};

TEST(Metrics, TextfileIsWholeReadableAndLeavesNoTemporary) {
  unique_key key;
  Semaphore sem = Semaphore::open(key, 4);
  temp_dir dir;
  const std::string file = dir.path + "/shmsem.prom";
  const mode_t old_umask = ::umask(077);  // the file must be 0644 whatever the umask
  write_metrics_textfile(file);
  write_metrics_textfile(file);  // replaces the first
  ::umask(old_umask);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"shmsem.prom"});
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const exposition ex = parse(text);
  ASSERT_TRUE(ex.errors.empty()) << joined(ex.errors);
  EXPECT_EQ(ex.value("shmsem_permits_capacity", {{"key", key.str()}}), 4);
}

TEST(Metrics, TextfileReplacesATemporaryFileLeftByADeadWriterWithTheSamePid) {
  temp_dir dir;
  const std::string file = dir.path + "/shmsem.prom";
  // A fresh process, as the next run of a textfile job is. A writer that
  // had its pid before it (pids recycle) died between creating its
  // temporary file and renaming it.
  test::child_process next_run([&] {
    for (int n = 0; n < 4; ++n)
      std::ofstream(file + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(n))
          << "partial";
    write_metrics_textfile(file);
    return 0;
  });
  EXPECT_EQ(next_run.wait(), 0);
  const auto entries = dir.entries();
  EXPECT_NE(std::find(entries.begin(), entries.end(), "shmsem.prom"), entries.end());
}

TEST(Metrics, TextfileErrorNamesThePathAndLeavesNothing) {
  temp_dir dir;
  const std::string file = dir.path + "/missing/shmsem.prom";
  try {
    write_metrics_textfile(file);
    FAIL() << "wrote into a missing directory";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.entries().empty());
}

}  // namespace
}  // namespace shmsem
