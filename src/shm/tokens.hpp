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
// secret. A token file goes only with its segment, removed by a process
// that found nobody attached and no token held.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "shm/layout.hpp"
#include "sys/shm.hpp"

namespace shmsem::detail {

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
  /// description holds it. Throws SegmentError, naming the file, if the
  /// file cannot be made or opened, or does not hold the secret (a file
  /// this process may not open is not tried again until a fork).
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
  /// Removes every token file of records [0, records) of the segment whose
  /// token_nonce is `nonce`. Only for a segment being removed with nobody
  /// attached and no token held.
  static void remove_all(std::uint64_t nonce, std::uint32_t records) noexcept;

 private:
  // err: an errno, or kUntrusted.
  static constexpr int kUntrusted = -1;
  sys::shm_file* file(std::uint32_t index, bool make, int& err) const;
  [[noreturn]] void fail(std::uint32_t index, int err) const;

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
};

}  // namespace shmsem::detail
