// sys/shm.hpp: the segment file and its mapping. Boost.Interprocess creates,
// opens and maps it; the rest (OFD byte locks, fallocate, fstat checks,
// directory listing) are plain system calls. Every function reports a
// failure as an errno value, so the caller can name the path in its error.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shmsem::sys {

/// Where POSIX shared memory lives on Linux.
inline constexpr const char* kShmDir = "/dev/shm";

/// The path of the /dev/shm entry `name` (a segment's name, or a prefix of
/// names): the one place a file name in /dev/shm is built.
inline std::string shm_path(std::string_view name) {
  return std::string(kShmDir) + "/" + std::string(name);
}

/// An open segment file and (once map() succeeded) its shared mapping.
class shm_file {
 public:
  /// Opens /dev/shm/<name>, creating it (empty, with `mode` whatever the
  /// umask) when `create` is set and it is absent. The open never follows a
  /// symlink. Returns nullptr and sets `err` (an errno) on failure;
  /// `created` tells whether this call made the file.
  static std::unique_ptr<shm_file> open(const std::string& name, bool create, mode_t mode, int& err,
                                        bool& created);
  /// Opens /dev/shm/<name> read-only, for reading with read_at() and for
  /// asking about locks; it is never mapped. Never follows a symlink and
  /// never blocks (on a FIFO planted at the name). Returns nullptr and sets
  /// `err` (an errno) on failure.
  static std::unique_ptr<shm_file> open_read_only(const std::string& name, int& err);
  /// The same, read-write: for exclusive locks. It never creates the file.
  static std::unique_ptr<shm_file> open_for_locks(const std::string& name, int& err);
  ~shm_file();
  shm_file(const shm_file&) = delete;
  shm_file& operator=(const shm_file&) = delete;

  int fd() const;
  /// fstat: type, size, links. Returns errno or 0.
  int stat(struct ::stat& st) const;
  /// Maps `size` bytes shared read-write at offset 0. The size may exceed
  /// the file: pages past the end are only touched once the file grows.
  int map(std::size_t size);
  void* base() const { return base_; }
  /// Allocates [off, off+len) so later page faults cannot fail (a full
  /// tmpfs gives ENOSPC here instead of SIGBUS later). Returns errno or 0.
  int allocate(std::uint64_t off, std::uint64_t len);
  /// Reads up to `n` bytes at `off`; what lies past the end of the file
  /// reads as zeros. Returns errno or 0.
  int read_at(std::uint64_t off, void* buf, std::size_t n) const;
  /// A new close-on-exec descriptor sharing this open file description (and
  /// so its OFD locks). Returns it, or -1 with errno set.
  int dup_description() const;
  /// Open-file-description byte locks (F_OFD_*): held per open file
  /// description and dropped by the kernel when the last fd to it closes,
  /// on any death of the holder. They serve as liveness tokens.
  /// try_lock: returns true if taken (exclusive or shared).
  bool try_lock(std::uint64_t byte, bool exclusive);
  /// The same for [first, first + count); a count of 0 reaches past the
  /// end of the file, however far it grows.
  bool try_lock(std::uint64_t first, std::uint64_t count, bool exclusive);
  /// Retries try_lock until the absolute CLOCK_MONOTONIC deadline.
  bool lock_until(std::uint64_t byte, bool exclusive, std::int64_t deadline_ns);
  void unlock(std::uint64_t byte);
  /// True if another open file description holds a lock on `byte`.
  bool locked_by_other(std::uint64_t byte) const;
  /// True if another open file description holds a lock on any byte of
  /// [first, first + count) (a count of 0: up to past the end). True also
  /// when the kernel cannot say.
  bool locked_by_other(std::uint64_t first, std::uint64_t count) const;
  /// Whether /dev/shm/<name> is this very file: 0 if it is, ENOENT if the
  /// name is gone, ESTALE if it names another file, another errno if that
  /// cannot be told.
  int at_name(const std::string& name) const;

 private:
  shm_file() = default;
  static std::unique_ptr<shm_file> open_plain(const std::string& name, int flags, int& err);
  /// A shm_file over `fd` from open(2), or null with `err` set from errno
  /// when `fd` is -1.
  static std::unique_ptr<shm_file> wrap_plain(int fd, int& err);
  struct impl;
  std::unique_ptr<impl> impl_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
};

/// Removes /dev/shm/<name>. Returns errno or 0.
int shm_remove(const std::string& name);

/// Creates /dev/shm/<name> holding the `n` bytes at `data`, with `mode`
/// whatever the umask, in one step: the file is written unnamed
/// (O_TMPFILE) and only then linked at the name, so whoever opens the name
/// finds it whole. It gets owner `uid` and group `gid` as far as this
/// process may give them (root: both; another user: a group it is in),
/// and otherwise its own. Returns errno or 0; EEXIST if the name was taken
/// first.
int shm_publish(const std::string& name, const void* data, std::size_t n, mode_t mode, uid_t uid,
                gid_t gid);

/// Reads up to `n` bytes from the start of /dev/shm/<name> (read-only, no
/// symlinks, no blocking on a FIFO) and its size. Returns errno or 0.
int shm_read_prefix(const std::string& name, void* buf, std::size_t n, std::size_t& got,
                    std::uint64_t& size);

/// Names of the entries of /dev/shm that start with `prefix`.
std::vector<std::string> shm_list(const std::string& prefix);

/// Identity of a file, to tell whether a name still points to the file we have open.
struct file_id {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const file_id&) const = default;
};
/// lstat of /dev/shm/<name>. Returns errno or 0.
int shm_stat_name(const std::string& name, file_id& id);

}  // namespace shmsem::sys
