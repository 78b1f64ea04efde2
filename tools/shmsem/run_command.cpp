// shmsem/run_command.cpp: `shmsem run`, the flock(1)-style wrapper. It
// takes the seats, runs COMMAND as a child, forwards SIGINT/SIGTERM/SIGHUP
// to it, and exits with its status. If the wrapper is SIGKILLed the library
// reclaims its seats like any dead holder's, and the child is killed too
// (PR_SET_PDEATHSIG), so the bound of N commands at once still holds.
#include "commands.hpp"
#include "common.hpp"
#include "model.hpp"

#include <shmsem/semaphore.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shmsem_cli {
namespace {

struct run_options {
  std::string key;
  std::optional<int> permits;
  int weight = 1;
  std::string wait;
  bool nonblock = false;
  std::string ttl;
  bool auto_renew = false;
  bool skip = false;
  int conflict_code = kConflict;
  bool verbose = false;
  std::vector<std::string> command;
};

volatile sig_atomic_t g_child = 0;

// Forwards a signal to the child. A signal the terminal sent (Ctrl-C,
// hangup: si_code SI_KERNEL) already went to the whole foreground process
// group, the child included, so it is not sent twice.
void forward_signal(int sig, siginfo_t* info, void*) {
  if (info && info->si_code == SI_KERNEL) return;
  const pid_t child = g_child;
  if (child > 0) ::kill(child, sig);
}

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

// fork + exec with only async-signal-safe calls in the child. An exec
// failure comes back as an errno through a close-on-exec pipe.
pid_t spawn(const std::vector<std::string>& command, int& exec_errno) {
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::system_category(), "pipe");
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::system_error(e, std::system_category(), "fork");
  }
  if (pid == 0) {
    // Die with the wrapper: its seat is reclaimed when it dies, so the
    // command must not run on without one.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(kCannotExec);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : kForwarded) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvp(argv[0], argv.data());
    const int e = errno;
    ssize_t ignored = ::write(fds[1], &e, sizeof e);
    (void)ignored;
    ::_exit(e == ENOENT ? kNotExecutable : kCannotExec);
  }
  ::close(fds[1]);
  exec_errno = 0;
  ssize_t n;
  do n = ::read(fds[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  if (n != sizeof exec_errno) exec_errno = 0;
  ::close(fds[0]);
  return pid;
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kFailure;
}

// Waits for the child; while it runs, checks once a second (without any
// lock) that the seats are still held, and warns as soon as they are not.
int wait_child(pid_t pid, const shmsem::Permit& permit, const std::string& key, bool& warned) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  for (;;) {
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      const int r = ::poll(&p, 1, 1000);
      if (r == 0 || (r < 0 && errno == EINTR)) {
        if (!warned && !permit.is_held()) {
          error_message("warning: " + key + ": the seat was lost while the command runs " +
                        "(expired, reaped or force-released)");
          warned = true;
        }
        continue;
      }
    }
    int status = 0;
    const pid_t w = ::waitpid(pid, &status, 0);
    if (w == pid) {
      if (pidfd >= 0) ::close(pidfd);
      return exit_status(status);
    }
    if (w < 0 && errno != EINTR) {
      if (pidfd >= 0) ::close(pidfd);
      throw std::system_error(errno, std::system_category(), "waitpid");
    }
  }
}

int run(const run_options& o) {
  std::optional<std::chrono::milliseconds> wait, ttl;
  if (!o.wait.empty() && !(wait = parse_duration(o.wait))) {
    error_message("bad duration for --wait: " + o.wait);
    return kUsage;
  }
  if (!o.ttl.empty() && !(ttl = parse_duration(o.ttl))) {
    error_message("bad duration for --ttl: " + o.ttl);
    return kUsage;
  }
  if (o.auto_renew && !ttl) {
    error_message("--auto-renew needs --ttl");
    return kUsage;
  }
  if (o.command.empty()) {
    error_message("run: no COMMAND given (shmsem run KEY -p N -- COMMAND [ARGS...])");
    return kUsage;
  }
  auto sem =
      o.permits ? shmsem::Semaphore::open(o.key, *o.permits) : semtop::attach_existing(o.key);
  shmsem::AcquireOptions ao;
  if (ttl) ao.ttl = *ttl;
  if (o.auto_renew) ao.auto_renew = true;
  std::optional<shmsem::Permit> permit;
  std::string why = "no seat free";
  if (o.nonblock) {
    permit = sem.try_acquire(o.weight, ao);
    if (!permit && o.weight > sem.capacity()) why = "weight exceeds the capacity";
  } else {
    if (wait) ao.wait_timeout = *wait;
    try {
      permit = sem.acquire(o.weight, ao);
    } catch (const shmsem::AcquisitionError& e) {
      if (e.reason() == shmsem::Reason::error) throw;
      why = shmsem::to_string(e.reason());
      if (e.reason() == shmsem::Reason::exceeds_capacity) why = "weight exceeds the capacity";
    }
  }
  if (!permit) {
    if (o.skip) return kOk;
    if (o.verbose) error_message(o.key + ": " + why);
    return o.conflict_code;
  }
  if (o.verbose) error_message(o.key + ": got " + std::to_string(o.weight) + " seat(s)");

  // Block the forwarded signals until the child's pid is known, so none is
  // lost between fork and the handlers.
  sigset_t fwd, old;
  sigemptyset(&fwd);
  for (int sig : kForwarded) sigaddset(&fwd, sig);
  ::sigprocmask(SIG_BLOCK, &fwd, &old);
  int exec_errno = 0;
  pid_t pid;
  try {
    pid = spawn(o.command, exec_errno);
  } catch (...) {
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  g_child = pid;
  struct sigaction sa {};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwarded) ::sigaction(sig, &sa, nullptr);
  ::sigprocmask(SIG_SETMASK, &old, nullptr);

  bool warned = false;
  int status = wait_child(pid, *permit, o.key, warned);
  g_child = 0;
  if (exec_errno != 0) {
    error_message(o.command[0] + ": " + std::strerror(exec_errno));
    status = exec_errno == ENOENT ? kNotExecutable : kCannotExec;
  }
  try {
    permit->release();
  } catch (const shmsem::PermitNotHeldError& e) {
    if (!warned) error_message(std::string("warning: ") + e.what());
  }
  return status;
}

}  // namespace

void add_run_command(CLI::App& app, int& result) {
  auto o = std::make_shared<run_options>();
  auto* cmd =
      app.add_subcommand("run",
                         "Hold seats of KEY while COMMAND runs; exit with COMMAND's status.\n"
                         "Without -w or --nonblock it waits as long as it takes.");
  cmd->add_option("key", o->key, "Semaphore key")->required();
  cmd->add_option("-p,--permits", o->permits,
                  "Capacity if the semaphore must be created (without it, KEY must exist)")
      ->check(CLI::Range(1, 1'000'000));
  cmd->add_option("-n,--weight", o->weight, "Seats to take (default 1)")
      ->check(CLI::Range(1, 1'000'000));
  cmd->add_option("-w,--wait", o->wait, "Wait at most this long (500ms, 10s, 5m, or seconds)");
  cmd->add_flag("--nonblock", o->nonblock, "Do not wait: fail at once if no seat is free");
  cmd->add_option("--ttl", o->ttl, "Lease TTL: the seat lapses after this long unless renewed");
  cmd->add_flag("--auto-renew", o->auto_renew, "Keep renewing the TTL while COMMAND runs");
  cmd->add_flag("--skip", o->skip, "When no seat can be had, exit 0 without running COMMAND");
  cmd->add_option("-E,--conflict-exit-code", o->conflict_code,
                  "Exit code when no seat can be had (default 1)")
      ->check(CLI::Range(0, 255));
  cmd->add_flag("-v,--verbose", o->verbose, "Say on stderr when the seat is taken or refused");
  cmd->add_option("command", o->command, "COMMAND [ARGS...], after --");
  cmd->callback([o, &result] { result = run(*o); });
}

}  // namespace shmsem_cli
