// sys/proc.hpp: what /proc and the kernel say about processes (this one's
// pid and host name included). Used to label holders
// (pid, command, PID namespace); liveness itself comes from OFD lock
// tokens, not from PIDs, so PID reuse and zombies cannot fool it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace shmsem::sys {

struct process_identity {
  pid_t pid = 0;                 ///< as this process's /proc sees it
  std::uint64_t start_time = 0;  ///< field 22 of /proc/self/stat, clock ticks since boot
  std::uint64_t pid_ns = 0;      ///< inode of /proc/self/ns/pid
  uid_t uid = 0;
  char comm[16] = {};
};

/// The calling process's identity, read from /proc/self (never from
/// /proc/<getpid()>, which is another process in a foreign PID namespace).
process_identity self_identity();

/// Inode of this process's PID namespace (0 if unknown).
std::uint64_t self_pid_ns();

/// /proc/<pid>/comm, or "" if it cannot be read.
std::string process_command(pid_t pid);

/// The state letter of /proc/<pid>/stat (R, S, D, T, t, Z, ...), or 0 if
/// it cannot be read.
char process_state(pid_t pid);

/// getpid(): this process's pid in its own PID namespace.
pid_t self_pid() noexcept;

/// 64 bits from the kernel's random source (getrandom). Returns errno or 0.
int random_u64(std::uint64_t& out) noexcept;

enum class exit_wait { exited, timed_out, unavailable };

/// Sleeps until process `pid` (of this PID namespace) has exited, or until
/// the absolute CLOCK_MONOTONIC deadline: a pidfd (Linux 5.3 and later),
/// readable once the process has let go of its files. `exited` also when no
/// such process exists; `unavailable` where pidfds are not. A hint only: a
/// pid may have been reused, so the caller still asks the liveness token.
exit_wait wait_for_exit(pid_t pid, std::int64_t deadline_ns);

/// Whether process `pid` (of this PID namespace), started at `start_time`
/// (field 22 of its /proc stat), is exiting in every thread: each one shows
/// PF_EXITING, so none will run another instruction of user space. That
/// happens before the kernel tears down the process's memory and closes its
/// files, which for a large process is milliseconds. False when /proc cannot
/// tell (not mounted, hidden, or the pid belongs to another process now).
/// Costs a read of /proc per thread, twice.
bool process_exiting(pid_t pid, std::uint64_t start_time);

/// gethostname(), or "unknown" if it fails.
std::string host_name();

/// How many CPUs this process may run on (its affinity mask); 1 if the
/// kernel cannot say.
int cpus_usable() noexcept;

}  // namespace shmsem::sys
