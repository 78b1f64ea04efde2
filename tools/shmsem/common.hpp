// shmsem/common.hpp: what every shmsem command shares: the exit codes, the
// duration syntax, and the mapping from exceptions to exit codes.
#pragma once

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace shmsem_cli {

/// The exit codes of every command (also in shmsem(1)).
enum exit_code : int {
  kOk = 0,
  kConflict = 1,  ///< run: no seat (change with -E); wait-idle: timed out
  kUsage = 2,     ///< bad arguments
  kNotFound = 3,  ///< no such semaphore
  kSegment = 4,   ///< the segment is unusable: corrupt, incompatible, no permission, full
  kFailure = 5,   ///< anything else that failed
  kInUse = 6,     ///< rm: live processes use the semaphore (--force removes it anyway)
  kCannotExec = 126,
  kNotExecutable = 127,  ///< run: COMMAND not found
};

/// Parses "500ms", "10s", "5m", "1h", "1.5" (plain seconds) or "2.5s".
/// Returns nullopt for anything else, negative values included.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

/// Parses an octal mode such as "0660" or "660" (at most 0777).
std::optional<unsigned> parse_mode(std::string_view text);

/// Prints "shmsem: <what>" to stderr and returns the exit code for e.
int report_error(const std::exception& e);

/// The exit code for e, without printing anything.
int exit_code_for(const std::exception& e);

/// Adds --trust-owner USER (repeatable) to a command, filling `owners`
/// (Options::trusted_owners). USER is a user name or a uid.
void add_trust_option(CLI::App* cmd, std::vector<std::string>& owners);

/// Prints "shmsem: <message>" to stderr.
void error_message(const std::string& message);

/// True for a Redis URL that names a server but no semaphore in it
/// (redis://host:port, redis+unix://PATH): ls, reap and metrics then act
/// on every semaphore there.
bool is_server_url(std::string_view text);

}  // namespace shmsem_cli
