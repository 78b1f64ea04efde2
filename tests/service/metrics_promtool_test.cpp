// metrics_promtool_test.cpp: the exposition checked by Prometheus's own
// linter, `promtool check metrics` (Debian package `prometheus`), with keys
// full of special characters. Skipped, saying so, when promtool is absent.
#include <shmsem/shmsem.hpp>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "service_test_util.hpp"
#include "test_support.hpp"

namespace shmsem {
namespace {

std::string find_promtool() {
  for (const char* p : {"/usr/bin/promtool", "/usr/local/bin/promtool"})
    if (::access(p, X_OK) == 0) return p;
  return {};
}

// Runs `promtool check metrics < file`; returns its exit status and output.
std::pair<int, std::string> promtool_check(const std::string& promtool, const std::string& file) {
  const std::string cmd = promtool + " check metrics < " + file + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

struct temp_file {
  temp_file() {
    char tmpl[] = "/tmp/shmsem-promtool-XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd < 0) throw std::runtime_error("mkstemp");
    ::close(fd);
    path = tmpl;
  }
  ~temp_file() { ::unlink(path.c_str()); }
  std::string path;
};

TEST(MetricsPromtool, HostExpositionWithSpecialKeysPassesPromtool) {
  const std::string promtool = find_promtool();
  if (promtool.empty())
    SHMSEM_SKIP_WITHOUT_CAPABILITY(
        "promtool not installed (Debian package `prometheus`); the "
        "exposition is still parsed back by metrics_test");
  test::unique_key base;
  const std::vector<std::string> keys = {base.str() + " q\"uote",
                                         base.str() + " back\\slash",
                                         base.str() + " new\nline",
                                         base.str() + " tab\tcr\r",
                                         base.str() + " {b}=,le=\"1\" \xC3\xA9",
                                         base.str() + " not utf-8 \xFF",
                                         base.str() + " not utf-8 \xFE",
                                         base.str() + " \xEF\xBF\xBD"};
  test::key_remover cleanup(keys);
  std::vector<Semaphore> open;
  for (const auto& k : keys) {
    open.push_back(Semaphore::open(k, 2));
    Permit p = open.back().acquire();
    p.release();
  }
  temp_file file;
  write_metrics_textfile(file.path);
  auto [rc, out] = promtool_check(promtool, file.path);
  EXPECT_EQ(rc, 0) << out;
}

TEST(MetricsPromtool, PromtoolRejectsABrokenExposition) {
  // The check above can fail: promtool does reject an unescaped newline.
  const std::string promtool = find_promtool();
  if (promtool.empty())
    SHMSEM_SKIP_WITHOUT_CAPABILITY("promtool not installed (Debian package `prometheus`)");
  temp_file file;
  FILE* f = std::fopen(file.path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("# HELP a x\n# TYPE a gauge\na{key=\"x\ny\"} 1\n", f);
  std::fclose(f);
  EXPECT_NE(promtool_check(promtool, file.path).first, 0);
}

}  // namespace
}  // namespace shmsem
