#include "tool_runner.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <iostream>
#include <sstream>
#include <thread>

namespace shmsem::test {
namespace {

using clock = std::chrono::steady_clock;

int remaining_ms(clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Forks and execs argv with the given fds as stdin/stdout/stderr.
pid_t start(const std::vector<std::string>& argv, int in, int out, int err) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::system_category(), "fork");
  if (pid == 0) {
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::setpgid(0, 0);  // its own group, so a stray terminal signal never reaches the test
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

tool_result run_tool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  running_tool t(argv);
  t.close_stdin();
  tool_result r;
  r.status = t.wait(timeout);
  // wait() drained both pipes to EOF.
  r.err = t.stderr_text();
  r.out = t.stdout_text();
  return r;
}

running_tool::running_tool(const std::vector<std::string>& argv) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC))
    throw std::system_error(errno, std::system_category(), "pipe2");
  pid_ = start(argv, in[0], out[1], err[1]);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  in_ = in[1];
  out_ = out[0];
  errfd_ = err[0];
}

running_tool::~running_tool() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  for (int fd : {in_, out_, errfd_})
    if (fd >= 0) ::close(fd);
}

bool running_tool::fill(int fd, std::string& buf, clock::time_point deadline) {
  pollfd p{fd, POLLIN, 0};
  int r;
  do r = ::poll(&p, 1, remaining_ms(deadline));
  while (r < 0 && errno == EINTR);
  if (r <= 0) return false;
  char chunk[4096];
  ssize_t n;
  do n = ::read(fd, chunk, sizeof chunk);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  buf.append(chunk, static_cast<std::size_t>(n));
  return true;
}

std::string running_tool::read_line(std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  for (;;) {
    const auto nl = out_buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = out_buf_.substr(0, nl);
      out_buf_.erase(0, nl + 1);
      return line;
    }
    if (out_ < 0 || !fill(out_, out_buf_, deadline)) break;
  }
  ADD_FAILURE() << "no line on stdout of pid " << pid_ << " within " << timeout.count()
                << " ms; got so far: " << out_buf_ << "\nstderr: " << err_;
  return {};
}

bool running_tool::wait_stderr(const std::string& text, std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  while (err_.find(text) == std::string::npos)
    if (errfd_ < 0 || !fill(errfd_, err_, deadline)) return false;
  return true;
}

void running_tool::close_stdin() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

void running_tool::kill(int sig) {
  ::kill(pid_, sig);
}

int running_tool::wait(std::chrono::milliseconds timeout) {
  if (reaped_) return status_;
  const auto deadline = clock::now() + timeout;
  // Drain both pipes so a chatty tool cannot block on a full pipe; EOF on
  // both means the tool (and whatever inherited its pipes) is done.
  bool out_open = out_ >= 0, err_open = errfd_ >= 0;
  while (out_open || err_open) {
    pollfd p[2] = {{out_open ? out_ : -1, POLLIN, 0}, {err_open ? errfd_ : -1, POLLIN, 0}};
    int r;
    do r = ::poll(p, 2, remaining_ms(deadline));
    while (r < 0 && errno == EINTR);
    if (r <= 0) break;
    char chunk[4096];
    for (int i = 0; i < 2; ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(p[i].fd, chunk, sizeof chunk);
      if (n > 0)
        (i == 0 ? out_buf_ : err_).append(chunk, static_cast<std::size_t>(n));
      else if (n == 0 || errno != EINTR)
        (i == 0 ? out_open : err_open) = false;
    }
  }
  for (;;) {
    int st = 0;
    const pid_t w = ::waitpid(pid_, &st, WNOHANG);
    if (w == pid_) {
      reaped_ = true;
      status_ = decode(st);
      return status_;
    }
    if (clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "pid " << pid_ << " did not exit within " << timeout.count()
                << " ms\nstdout: " << out_buf_ << "\nstderr: " << err_;
  return -1;
}

// ---------------------------------------------------------------- tmux

namespace {
std::atomic<int> tmux_counter{0};
}

tmux_session::tmux_session(int width, int height) {
  socket_ = "shmsem-test-" + std::to_string(::getpid()) + "-" + std::to_string(tmux_counter++);
  ::unsetenv("TMUX");
  // A UTF-8 locale, which glibc always has (C.UTF-8), as a user's terminal
  // has: a machine whose environment sets none (a container, a minimal
  // install) would otherwise run the tools in the C locale, where semtop
  // draws ASCII instead of the ellipsis the tests look for.
  auto r =
      tmux({"-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", std::to_string(width), "-y",
            std::to_string(height), "env", "PS1=$ ", "TERM=screen", "LC_ALL=C.UTF-8", "/bin/sh"});
  EXPECT_EQ(r.status, 0) << "tmux new-session failed: " << r.err;
  // Keep the pane's size fixed regardless of (absent) clients.
  tmux({"set-option", "-g", "window-size", "manual"});
}

tmux_session::~tmux_session() {
  tmux({"kill-server"});
}

tool_result tmux_session::tmux(std::vector<std::string> args) const {
  args.insert(args.begin(), {"tmux", "-L", socket_});
  return run_tool(args, std::chrono::seconds(30));
}

void tmux_session::send_keys(const std::vector<std::string>& keys) {
  std::vector<std::string> args = {"send-keys", "-t", "t"};
  args.insert(args.end(), keys.begin(), keys.end());
  auto r = tmux(args);
  EXPECT_EQ(r.status, 0) << r.err;
}

void tmux_session::type_line(const std::string& line) {
  tmux({"send-keys", "-t", "t", "-l", line});
  send_keys({"Enter"});
}

std::vector<std::string> tmux_session::capture() const {
  std::vector<std::string> lines;
  std::istringstream in(capture_text());
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::string tmux_session::capture_text() const {
  return tmux({"capture-pane", "-p", "-t", "t"}).out;
}

bool tmux_session::wait_for(const std::string& text, std::chrono::milliseconds timeout) const {
  const auto deadline = clock::now() + timeout;
  std::string last;
  do {
    last = capture_text();
    if (last.find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (clock::now() < deadline);
  ADD_FAILURE() << "\"" << text << "\" never appeared; the pane shows:\n" << last;
  return false;
}

bool tmux_session::wait_gone(const std::string& text, std::chrono::milliseconds timeout) const {
  const auto deadline = clock::now() + timeout;
  std::string last;
  do {
    last = capture_text();
    if (last.find(text) == std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (clock::now() < deadline);
  ADD_FAILURE() << "\"" << text << "\" never went away; the pane shows:\n" << last;
  return false;
}

void tmux_session::resize(int width, int height) {
  auto r =
      tmux({"resize-window", "-t", "t", "-x", std::to_string(width), "-y", std::to_string(height)});
  EXPECT_EQ(r.status, 0) << r.err;
}

}  // namespace shmsem::test
