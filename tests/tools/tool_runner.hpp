// tool_runner.hpp: running the real semtop and shmsem binaries (and tmux)
// from a test: as a finished command with its output, or as a process the
// test talks to through pipes while it runs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace shmsem::test {

/// What a finished command left behind.
struct tool_result {
  int status = -1;  ///< exit status, 128+signal if killed, -1 if it never ended
  std::string out;
  std::string err;
};

/// Runs argv (argv[0] searched in PATH) to completion with stdin from
/// /dev/null; fails the test and kills it if it takes longer than timeout.
tool_result run_tool(const std::vector<std::string>& argv,
                     std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// A command running in the background, with pipes to its stdin, stdout
/// and stderr. The destructor SIGKILLs and reaps it if it still runs.
class running_tool {
 public:
  explicit running_tool(const std::vector<std::string>& argv);
  ~running_tool();
  running_tool(const running_tool&) = delete;
  running_tool& operator=(const running_tool&) = delete;

  pid_t pid() const { return pid_; }
  /// Reads stdout until a full line arrives; "" (and a test failure) on
  /// timeout or EOF.
  std::string read_line(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Waits until stderr contains `text`; false on timeout or EOF.
  bool wait_stderr(const std::string& text,
                   std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Closes the tool's stdin (a `read` in its command then ends).
  void close_stdin();
  void kill(int sig);
  /// Waits for exit; returns the status (128+signal if killed), or -1 with
  /// a test failure after timeout.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  const std::string& stderr_text() const { return err_; }
  /// What stdout gave so far and was not returned by read_line().
  const std::string& stdout_text() const { return out_buf_; }

 private:
  bool fill(int fd, std::string& buf, std::chrono::steady_clock::time_point deadline);

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, errfd_ = -1;
  std::string out_buf_, err_;
  bool reaped_ = false;
  int status_ = -1;
};

/// A tmux server of its own (tmux -L <unique socket>) with one session,
/// sized width x height, running /bin/sh. Killed on destruction.
class tmux_session {
 public:
  tmux_session(int width, int height);
  ~tmux_session();
  tmux_session(const tmux_session&) = delete;
  tmux_session& operator=(const tmux_session&) = delete;

  /// tmux send-keys; each element is one key name or string ("Enter", "q").
  void send_keys(const std::vector<std::string>& keys);
  /// Types a shell command line and presses Enter.
  void type_line(const std::string& line);
  /// The visible pane, one string per line.
  std::vector<std::string> capture() const;
  std::string capture_text() const;
  /// Polls the pane until `text` is on it; false (with the last capture
  /// printed) after timeout.
  bool wait_for(const std::string& text,
                std::chrono::milliseconds timeout = std::chrono::seconds(20)) const;
  /// Polls until `text` is no longer on the pane.
  bool wait_gone(const std::string& text,
                 std::chrono::milliseconds timeout = std::chrono::seconds(20)) const;
  void resize(int width, int height);

 private:
  tool_result tmux(std::vector<std::string> args) const;
  std::string socket_;
};

#ifdef SHMSEM_BIN
/// Runs the shmsem tool of this build with `args`.
inline tool_result shmsem_cli(std::vector<std::string> args) {
  args.insert(args.begin(), SHMSEM_BIN);
  return run_tool(args);
}

/// The argv of `shmsem run KEY EXTRA... -- COMMAND...`.
inline std::vector<std::string> run_args(std::string_view key, std::vector<std::string> extra,
                                         std::vector<std::string> command) {
  std::vector<std::string> a = {SHMSEM_BIN, "run", std::string(key)};
  a.insert(a.end(), extra.begin(), extra.end());
  a.push_back("--");
  a.insert(a.end(), command.begin(), command.end());
  return a;
}
#endif

}  // namespace shmsem::test
