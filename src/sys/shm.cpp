// sys/shm.cpp: the system calls on the segment file and its mapping (see
// shm.hpp).

#include "sys/shm.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstring>
#include <thread>

#include "sys/clock.hpp"
#include "sys/users.hpp"

namespace bip = boost::interprocess;

namespace shmsem::sys {

struct shm_file::impl {
  bip::shared_memory_object object;
  bip::mapped_region region;
  int plain_fd = -1;  // open_read_only(), open_for_locks(): no Boost object
  ~impl() {
    if (plain_fd >= 0) ::close(plain_fd);
  }
};

std::unique_ptr<shm_file> shm_file::open(const std::string& name, bool create, mode_t mode,
                                         int& err, bool& created) {
  err = 0;
  created = false;
  std::unique_ptr<shm_file> f(new shm_file);
  f->impl_ = std::make_unique<impl>();
  // glibc's shm_open, under Boost, adds O_NOFOLLOW | O_CLOEXEC: a symlink
  // planted at the name is refused with ELOOP and exec'd children do not
  // inherit the fd (and with it our liveness tokens).
  for (int attempt = 0; attempt < 8; ++attempt) {
    try {
      if (create) {
        try {
          bip::permissions perm(static_cast<unsigned>(mode));
          f->impl_->object =
              bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write, perm);
          created = true;
        } catch (const bip::interprocess_exception& e) {
          if (e.get_error_code() != bip::already_exists_error) throw;
          f->impl_->object =
              bip::shared_memory_object(bip::open_only, name.c_str(), bip::read_write);
        }
      } else {
        f->impl_->object = bip::shared_memory_object(bip::open_only, name.c_str(), bip::read_write);
      }
      break;
    } catch (const bip::interprocess_exception& e) {
      err = e.get_native_error();
      if (err == 0) err = EIO;
      // Created and removed between our two calls: try again.
      if (create && err == ENOENT) continue;
      return nullptr;
    }
  }
  if (err) return nullptr;
  // A default ACL on the directory was inherited into the new file's access
  // ACL: drop it, so that the mode asked for is the whole truth about who
  // may use the segment (and other users' ownership checks do not refuse
  // it for ACL entries its creator never chose).
  if (created && ((err = drop_access_acl(f->fd())) != 0 || ::fchmod(f->fd(), mode) != 0)) {
    if (!err) err = errno;
    return nullptr;
  }
  return f;
}

std::unique_ptr<shm_file> shm_file::wrap_plain(int fd, int& err) {
  err = fd < 0 ? errno : 0;
  if (fd < 0) return nullptr;
  std::unique_ptr<shm_file> f(new shm_file);
  f->impl_ = std::make_unique<impl>();
  f->impl_->plain_fd = fd;
  return f;
}

std::unique_ptr<shm_file> shm_file::open_plain(const std::string& name, int flags, int& err) {
  const std::string p = shm_path(name);
  // Not shm_open: it would block on a FIFO planted at the name.
  return wrap_plain(::open(p.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), err);
}

std::unique_ptr<shm_file> shm_file::open_read_only(const std::string& name, int& err) {
  return open_plain(name, O_RDONLY, err);
}

std::unique_ptr<shm_file> shm_file::open_for_locks(const std::string& name, int& err) {
  return open_plain(name, O_RDWR, err);
}

shm_file::~shm_file() = default;

int shm_file::fd() const {
  if (impl_->plain_fd >= 0) return impl_->plain_fd;
  return static_cast<int>(impl_->object.get_mapping_handle().handle);
}

int shm_file::read_at(std::uint64_t off, void* buf, std::size_t n) const {
  auto* out = static_cast<char*>(buf);
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd(), out + got, n - got, static_cast<off_t>(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  std::memset(out + got, 0, n - got);
  return 0;
}

int shm_file::dup_description() const {
  return ::fcntl(fd(), F_DUPFD_CLOEXEC, 3);
}

int shm_file::stat(struct ::stat& st) const {
  return ::fstat(fd(), &st) == 0 ? 0 : errno;
}

int shm_file::map(std::size_t size) {
  try {
    impl_->region = bip::mapped_region(impl_->object, bip::read_write, 0, size);
    base_ = impl_->region.get_address();
    size_ = size;
    return 0;
  } catch (const bip::interprocess_exception& e) {
    return e.get_native_error() ? e.get_native_error() : ENOMEM;
  }
}

int shm_file::allocate(std::uint64_t off, std::uint64_t len) {
  if (len == 0) return 0;
  int r;
  do r = ::fallocate(fd(), 0, static_cast<off_t>(off), static_cast<off_t>(len));
  while (r != 0 && errno == EINTR);
  return r == 0 ? 0 : errno;
}

namespace {
struct flock make_lock(short type, std::uint64_t byte) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = static_cast<off_t>(byte);
  l.l_len = 1;
  l.l_pid = 0;  // required for F_OFD_*
  return l;
}
}  // namespace

bool shm_file::try_lock(std::uint64_t byte, bool exclusive) {
  return try_lock(byte, 1, exclusive);
}

bool shm_file::try_lock(std::uint64_t first, std::uint64_t count, bool exclusive) {
  struct flock l = make_lock(exclusive ? F_WRLCK : F_RDLCK, first);
  l.l_len = static_cast<off_t>(count);
  int r;
  do r = ::fcntl(fd(), F_OFD_SETLK, &l);
  while (r != 0 && errno == EINTR);
  return r == 0;
}

bool shm_file::lock_until(std::uint64_t byte, bool exclusive, std::int64_t deadline_ns) {
  // F_OFD_SETLKW has no timeout, and a stopped holder would hold us forever,
  // so poll with a growing pause. This runs only while opening a segment.
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    if (try_lock(byte, exclusive)) return true;
    if (precise_now_ns() >= deadline_ns) return false;
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(5)) pause *= 2;
  }
}

void shm_file::unlock(std::uint64_t byte) {
  struct flock l = make_lock(F_UNLCK, byte);
  ::fcntl(fd(), F_OFD_SETLK, &l);
}

bool shm_file::locked_by_other(std::uint64_t byte) const {
  struct flock l = make_lock(F_WRLCK, byte);
  if (::fcntl(fd(), F_OFD_GETLK, &l) != 0) return true;  // unknown: never judge dead on error
  return l.l_type != F_UNLCK;
}

bool shm_file::locked_by_other(std::uint64_t first, std::uint64_t count) const {
  struct flock l = make_lock(F_WRLCK, first);
  l.l_len = static_cast<off_t>(count);
  if (::fcntl(fd(), F_OFD_GETLK, &l) != 0) return true;
  return l.l_type != F_UNLCK;
}

int shm_file::at_name(const std::string& name) const {
  struct ::stat mine;
  if (::fstat(fd(), &mine) != 0) return errno;
  file_id there;
  if (const int err = shm_stat_name(name, there); err != 0) return err;
  return there == file_id{mine.st_dev, mine.st_ino} ? 0 : ESTALE;
}

int shm_publish(const std::string& name, const void* data, std::size_t n, mode_t mode, uid_t uid,
                gid_t gid) {
  const int fd = ::open(kShmDir, O_TMPFILE | O_RDWR | O_CLOEXEC, mode & 07777);
  if (fd < 0) return errno;
  int err = 0;
  const auto* p = static_cast<const char*>(data);
  for (std::size_t done = 0; done < n && err == 0;) {
    const ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0 && errno != EINTR) err = errno;
    if (w > 0) done += static_cast<std::size_t>(w);
  }
  // An owner or group this process may not give stays its own: the mode
  // then decides who else may open the file, and they are told if not.
  if (err == 0 && ::fchown(fd, uid, gid) != 0) (void)::fchown(fd, static_cast<uid_t>(-1), gid);
  if (err == 0 && ::fchmod(fd, mode & 07777) != 0) err = errno;
  // linkat() with AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; through
  // /proc/self/fd it needs nothing. It never replaces an existing name.
  if (err == 0) {
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, shm_path(name).c_str(), AT_SYMLINK_FOLLOW) != 0)
      err = errno;
  }
  ::close(fd);
  return err;
}

int shm_remove(const std::string& name) {
  std::string n = "/" + name;
  return ::shm_unlink(n.c_str()) == 0 ? 0 : errno;
}

int shm_read_prefix(const std::string& name, void* buf, std::size_t n, std::size_t& got,
                    std::uint64_t& size) {
  got = 0;
  size = 0;
  std::string p = shm_path(name);
  int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno;
  struct ::stat st;
  int err = 0;
  if (::fstat(fd, &st) != 0) {
    err = errno;
  } else if (!S_ISREG(st.st_mode)) {
    err = EINVAL;
  } else {
    // The header first, then the size: a table grows the file before it
    // publishes its new length, so a size read after the header covers it.
    const ssize_t r = ::pread(fd, buf, n, 0);
    if (r < 0 || ::fstat(fd, &st) != 0) {
      err = errno;
    } else {
      got = static_cast<std::size_t>(r);
      size = static_cast<std::uint64_t>(st.st_size);
    }
  }
  ::close(fd);
  return err;
}

std::vector<std::string> shm_list(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(kShmDir);
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.compare(0, prefix.size(), prefix) == 0) out.push_back(std::move(n));
  }
  ::closedir(d);
  return out;
}

int shm_stat_name(const std::string& name, file_id& id) {
  struct ::stat st;
  std::string p = shm_path(name);
  if (::lstat(p.c_str(), &st) != 0) return errno;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  return 0;
}

}  // namespace shmsem::sys
