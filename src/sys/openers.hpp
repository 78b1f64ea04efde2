// sys/openers.hpp: which processes have a file open, from /proc: each
// descriptor's target, and the OFD locks its open file description holds
// (the "lock:" lines of /proc/<pid>/fdinfo/<fd>, which list only the locks
// of that description). /proc/locks cannot tell this: it shows the pid of
// an OFD lock as -1. Only the processes whose /proc/<pid>/fd this process
// may read are seen (its own user's, or all of them for root).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shmsem::sys {

/// One OFD lock on one byte range.
struct ofd_lock {
  std::uint64_t start = 0;
  bool exclusive = false;
};

/// One descriptor of one process.
struct open_file {
  pid_t pid = 0;
  int fd = -1;
  std::string path;      ///< its target, without the " (deleted)" mark
  bool deleted = false;  ///< the file has no name any more (removed, or replaced)
  dev_t dev = 0;
  ino_t ino = 0;
  std::vector<ofd_lock> locks;  ///< OFD locks of its open file description
};

/// Every descriptor this process can see whose target path starts with
/// `prefix`, in one pass over /proc. Processes and descriptors that vanish
/// during the pass are left out.
std::vector<open_file> open_files_under(const std::string& prefix);

}  // namespace shmsem::sys
