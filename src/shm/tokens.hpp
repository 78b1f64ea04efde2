// tokens.hpp: the token files, where the holders of a segment keep their
// liveness tokens.
//
// A holder's token is an exclusive OFD lock on byte kTokenBase + its index,
// in token file index / kHoldersPerTokenFile of its segment (layout.hpp
// says why the tokens are not on the segment file). A token file is made
// on demand by the first process whose record falls in it, and it holds
// the segment's token_secret: a process trusts a token file only if it
// does, since a file planted at the name could hold locks that keep dead
// holders alive for ever, and only a user of the segment can read the
// secret.
//
// A token file in which no token is held may be removed by anyone, at any
// time (sweep()): with its segment, at the last detach of a removed
// segment, or by a garbage collection after a removed segment's last user
// exited without letting go. A sweep holds the whole file locked while it
// looks and removes, so nobody takes a token there meanwhile. A process
// therefore trusts a token it took, or one it found free, only once it has
// seen that the name still leads to the file it locked or asked: a holder
// never keeps its token where the others cannot find it, and the name
// cannot move while a token is held in the file it names.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shm/layout.hpp"
#include "sys/shm.hpp"

namespace shmsem::detail {

/// What the /dev/shm name of every token file starts with.
inline constexpr std::string_view kTokenFilePrefix = "shmsem-tokens.";

/// The /dev/shm name of token file `file` of the segment whose
/// token_nonce is `nonce`, and the prefix of all of that segment's.
std::string token_file_name(std::uint64_t nonce, std::uint32_t file);
std::string token_file_prefix(std::uint64_t nonce);

/// One segment's token files, as this process has them open.
class token_files {
 public:
  /// For the segment of `key` at `segment_path` whose header holds `nonce`
  /// and `secret` (named in errors). Files it makes have `mode` and, as
  /// far as this process may give them, owner `uid` and group `gid`: the
  /// segment's, so that whoever may use the segment may use its token files.
  token_files(std::string key, std::string segment_path, std::uint64_t nonce, std::uint64_t secret,
              mode_t mode, uid_t uid, gid_t gid);
  /// The same for a process that only asks about tokens (inspect, remove):
  /// it never makes a file or takes a token, and opens files read-only.
  token_files(std::string key, std::string segment_path, std::uint64_t nonce, std::uint64_t secret);
  ~token_files();
  token_files(const token_files&) = delete;
  token_files& operator=(const token_files&) = delete;

  /// Takes holder `h`'s token: true if taken, false if another open file
  /// description holds it (or a sweep holds its file, or kept replacing
  /// it while we tried). Throws SegmentError, naming the file, if the file
  /// cannot be made or opened, or does not hold the secret (a file this
  /// process may not open is not tried again until a fork).
  bool take(std::uint32_t h);
  void give_back(std::uint32_t h) noexcept;
  /// True if another open file description holds `h`'s token, or if that
  /// cannot be told (its file cannot be opened now): a live holder is never
  /// judged dead. A file that does not exist holds no token.
  bool held_by_other(std::uint32_t h) const noexcept;
  /// True if another open file description holds any token of records
  /// [0, records), or if that cannot be told.
  bool any_held_by_other(std::uint32_t records) const noexcept;
  /// A new close-on-exec descriptor of the open file description that
  /// holds `h`'s token; -1 with errno set.
  int dup_description(std::uint32_t h) const;
  /// The path of `h`'s token file.
  std::string path_of(std::uint32_t h) const;
  /// In a fork child: closes the descriptors inherited from the parent,
  /// whose descriptions hold the parent's tokens (the child's probes could
  /// not see them, and its own tokens must die with it), and opens every
  /// token file of records [0, records) afresh, while the child still has
  /// the parent's rights: a prefork worker drops them after the fork, and
  /// may then no longer open a file its parent made. A file that cannot be
  /// opened now is opened when needed.
  void reopen_after_fork(std::uint32_t records) noexcept;
  /// Removes /dev/shm/<name>, a token file, if no token is held in it.
  /// True if removed.
  static bool sweep(const std::string& name) noexcept;
  /// Sweeps every token file of records [0, records) of the segment whose
  /// token_nonce is `nonce`: those in which a token is held stay.
  static void sweep_all(std::uint64_t nonce, std::uint32_t records) noexcept;
  /// Sweeps the token files whose segment is not in /dev/shm (a removed
  /// segment's, left by its last user, which exited without letting go),
  /// or with `dry_run` only finds those that a sweep would remove now.
  /// Returns their paths. A segment this process cannot read does not
  /// count as there: its token files are swept too, which is safe, only
  /// not needed.
  static std::vector<std::string> sweep_orphans(bool dry_run);

 private:
  // err: an errno, or kUntrusted.
  static constexpr int kUntrusted = -1;
  sys::shm_file* file(std::uint32_t index, bool make, int& err) const;
  [[noreturn]] void fail(std::uint32_t index, int err) const;
  // Whether file `f` of `index` is still the one at its name: a sweep may
  // have removed it, and someone made it again. One that is not is
  // retired (the next file() opens the name afresh).
  enum class currency { current, replaced, unknown };
  currency check_current(std::uint32_t index, sys::shm_file* f) const;
  // Whether another description holds a lock on [first, first + count) of
  // file `index`, asked in the file at its name; true if that cannot be told.
  bool held_in(std::uint32_t index, std::uint64_t first, std::uint64_t count) const;
  // A retired file stays open until this object goes: another thread of
  // ours may be asking it at this moment.
  struct retired_file {
    std::unique_ptr<sys::shm_file> file;
    std::uint32_t index;
    retired_file* next;
  };
  void close_retired() noexcept;

  std::string key_;
  std::string segment_path_;
  std::uint64_t nonce_;
  std::uint64_t secret_;
  mode_t mode_;
  uid_t uid_;
  gid_t gid_;
  bool read_only_;
  mutable std::array<std::atomic<sys::shm_file*>, layout::kTokenFiles> files_{};
  // Files this process may not open (EACCES, EPERM, kUntrusted): asked
  // again only after a fork.
  mutable std::array<std::atomic<int>, layout::kTokenFiles> refused_{};
  // Lock-free, so that a fork child never finds it locked by a thread it
  // did not inherit.
  mutable std::atomic<retired_file*> retired_{nullptr};
};

}  // namespace shmsem::detail
