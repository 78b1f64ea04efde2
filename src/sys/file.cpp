// sys/file.cpp: files by name, replaced whole and durably (see file.hpp).

#include "sys/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace shmsem::sys {
namespace {

int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

int sync_directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  // Some file systems cannot flush a directory at all; the rename is then
  // as durable as they make it.
  if (err == EINVAL || err == EROFS) err = 0;
  return err;
}

}  // namespace

int replace_file(const std::string& path, std::string_view contents, mode_t mode,
                 replace_step& failed) {
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
  int fd = ::open(tmp.c_str(), kFlags, mode);
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0)
    fd = ::open(tmp.c_str(), kFlags, mode);
  if (fd < 0) {
    failed = replace_step::create;
    return errno;
  }
  auto fail = [&](replace_step step, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    failed = step;
    return err;
  };
  if (const int err = write_all(fd, contents)) return fail(replace_step::write, err);
  if (::fchmod(fd, mode) != 0) return fail(replace_step::chmod, errno);
  if (::fsync(fd) != 0) return fail(replace_step::sync, errno);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail(replace_step::close, errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(replace_step::rename, errno);
  if (const int err = sync_directory_of(path)) {
    failed = replace_step::sync_directory;
    return err;
  }
  return 0;
}

int name_identity(const std::string& path, dev_t& dev, ino_t& ino) {
  struct ::stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno;
  dev = st.st_dev;
  ino = st.st_ino;
  return 0;
}

}  // namespace shmsem::sys
