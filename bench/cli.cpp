// bench/cli.cpp: the command-line row. A cron job or a shell loop pays a
// wrapper's start-up on every job, so `shmsem run KEY -p 1 -- true` is timed
// per job beside the wrappers it replaces: flock(1) on a file, and GNU
// parallel's `sem` where it is installed. The three run in turn, one job of
// each per round, so that a busy neighbour weighs on all of them alike.
// Reported per wrapper: the median wall time of a job and the mean CPU time
// of the wrapper with its children (wait4's rusage).
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "harness.hpp"

extern char** environ;

namespace shmsem_bench {
namespace {

using benchmark::State;

struct wrapper {
  const char* name;  // the counter prefix: shmsem_run, flock, gnu_sem
  std::vector<std::string> argv;
  std::vector<std::int64_t> wall_ns;
  double cpu_ns = 0;
};

// The first `name` on $PATH that is executable, or "".
std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    std::size_t end = dirs.find(':', at);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(at, end - at) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    at = end + 1;
  }
  return {};
}

// Runs argv once with its output to /dev/null; false if it could not be
// started or did not exit with 0.
bool run_job(wrapper& w) {
  std::vector<char*> argv;
  for (auto& a : w.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  const std::int64_t t0 = now_ns();
  pid_t pid = -1;
  const int e = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (e != 0) return false;
  int status = 0;
  rusage ru{};
  while (::wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
  }
  w.wall_ns.push_back(now_ns() - t0);
  auto ns = [](const timeval& tv) { return tv.tv_sec * 1e9 + tv.tv_usec * 1e3; };
  w.cpu_ns += ns(ru.ru_utime) + ns(ru.ru_stime);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

void BM_CommandLine(State& state) {
  const int rounds = config().smoke ? 3 : 200;
  // GNU sem is a Perl program: a few rounds of it say enough.
  const int sem_rounds = config().smoke ? 1 : 10;
  ScopedKey key("cli");
  const std::string lock_file = "/dev/shm/" + unique_name("flock-cli");
  std::vector<wrapper> wrappers;
#ifdef SHMSEM_CLI_BIN
  wrappers.push_back({"shmsem_run", {SHMSEM_CLI_BIN, "run", key.str(), "-p", "1", "--", "true"}});
#endif
  if (const auto flock = find_program("flock"); !flock.empty())
    wrappers.push_back({"flock", {flock, lock_file, "true"}});
  if (const auto sem = find_program("sem"); !sem.empty())
    wrappers.push_back(
        {"gnu_sem",
         {sem, "--will-cite", "--id", unique_name("sem-cli"), "-j", "1", "--fg", "true"}});
  bool ok = true;
  for (auto _ : state) {
    for (int r = 0; r < rounds && ok; ++r)
      for (auto& w : wrappers)
        if (w.name != std::string("gnu_sem") || r < sem_rounds) ok = run_job(w) && ok;
  }
  ::unlink(lock_file.c_str());
  if (!ok) {
    state.SkipWithError("a wrapper failed to run `true`");
    return;
  }
  for (auto& w : wrappers) {
    const Percentiles p = percentiles(w.wall_ns);
    state.counters[std::string(w.name) + "_median_ns"] = p.median;
    state.counters[std::string(w.name) + "_cpu_ns"] = w.cpu_ns / static_cast<double>(p.count);
    state.counters[std::string(w.name) + "_jobs"] = static_cast<double>(p.count);
  }
}

}  // namespace

void register_command_line() {
  register_process("BM_CommandLine/wrappers", BM_CommandLine);
}

}  // namespace shmsem_bench
