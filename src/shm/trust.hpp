// trust.hpp: whose segments a process accepts, and whether the name it
// opened still leads to the segment it uses.
//
// /dev/shm is writable by every user (mode 1777), so any local user can
// create the file of a key before its service does, with a capacity and
// contents of their choosing (the /tmp squatting flaw, CWE-377). Before a
// byte of a segment is trusted, the descriptor actually opened is checked
// with fstat: its owner must be this process's effective uid or root; or
// this process is not root, the file is not writable by others, and its
// POSIX ACL lets no named user or group but the owner's own write it (a
// group can only be given a file by a member of it, so the file's group
// was chosen by the owner, but an ACL entry can name anyone); or the owner
// is named in Options::trusted_owners.
//
// Removing (or replacing) the file of a semaphore that processes still use
// splits it in two: they keep the old copy, and the next opener creates a
// new one. A process notices during the periodic work of a blocked acquire
// or wait_idle(), never on the hot path, and says so once.
#pragma once

#include <shmsem/stats.hpp>

#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace shmsem::detail {

struct attachment;

/// Throws std::invalid_argument for an entry of Options::trusted_owners that
/// is empty or names no user of this host (a typo would trust nobody, silently).
void validate_trusted_owners(const std::vector<std::string>& owners);

/// A segment file to judge: its status, and where its ACL is read from when
/// it matters: the descriptor `fd`, or if that is -1 the file at `path`
/// (a symlink is not followed).
struct file_status {
  const struct ::stat& st;
  int fd;
  const std::string& path;
};

/// Whether a process with effective uid `euid` accepts the segment file
/// `f`, trusting also the users in `trusted_owners` (names or decimal uids).
bool owner_trusted(const file_status& f, uid_t euid,
                   const std::vector<std::string>& trusted_owners);

/// Throws SegmentError (errc::untrusted_owner) unless this process accepts
/// the segment file `f` (at `f.path`). The message names the key, the path,
/// the owner (name and uid), the mode, why it is refused, and how to trust
/// it on purpose.
void check_owner(const file_status& f, std::string_view key,
                 const std::vector<std::string>& trusted_owners);

/// The owner, group and mode of `f`, with their names and this process's verdict.
SegmentOwner describe_owner(const file_status& f, const std::vector<std::string>& trusted_owners);

/// "nobody (uid 65534)", or "uid 64001" for a uid without a name.
std::string owner_text(const SegmentOwner& o);

/// True if the name `a` was opened under leads to the file `a` has open
/// (one lstat).
bool name_points_here(const attachment& a);

/// Periodic work only: about once a second at most, checks that `a`'s name
/// still leads to its file, and logs a warning, once per attachment, the
/// first time it does not.
void watch_name(attachment& a) noexcept;

/// Fills the owner and the name's state of a snapshot of `a`.
void describe_segment(const attachment& a, const std::vector<std::string>& trusted_owners,
                      Snapshot& s);

}  // namespace shmsem::detail
