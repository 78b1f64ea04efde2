// sys/file.hpp: files by name. A small file replaced whole and durably (the
// metrics textfile): readers of the name see the old file or the new one,
// never a part, and after a crash or a power cut the name holds one of the
// two. And which file a name points to now (the service cache's check that
// a cached segment was not removed). Every function reports a failure as
// an errno value, so the caller can name the path in its error.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace shmsem::sys {

/// The step of replace_file() that failed.
enum class replace_step { create, write, sync, chmod, close, rename, sync_directory };

/// Replaces `path` with a file holding `contents`, with `mode` whatever the
/// umask: writes a temporary file beside it, `<path>.tmp.<pid>.<n>` (n
/// counts the calls of this process), flushes it to disk (fsync), renames
/// it over `path` and flushes the directory, so that the rename lasts too.
/// The temporary name belongs to this process alone, so a file found there
/// was left by an earlier process with the same pid that died: it is
/// removed. Never follows a symlink at the temporary name.
/// Returns 0, or an errno with `failed` set; the temporary file is gone
/// then, except when only the directory flush failed (the new file is in
/// place, but the rename may not survive a crash).
int replace_file(const std::string& path, std::string_view contents, mode_t mode,
                 replace_step& failed);

/// lstat of `path`: the device and inode the name points to now. Returns
/// errno or 0. Makes no allocation.
int name_identity(const std::string& path, dev_t& dev, ino_t& ino);

}  // namespace shmsem::sys
