// bench/peers.cpp: set-up of the peer semaphores, and the process-shared
// form of every implementation, shmsem included.
#include "peers.hpp"

#include <shmsem/shmsem.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <stdexcept>
#include <system_error>

#include "harness.hpp"

namespace shmsem_bench {

namespace {
union semun {
  int val;
  semid_ds* buf;
  unsigned short* array;
};

int semop_undo(int id, int delta, short extra_flags) noexcept {
  sembuf op{0, static_cast<short>(delta), static_cast<short>(SEM_UNDO | extra_flags)};
  int r;
  while ((r = ::semop(id, &op, 1)) != 0 && errno == EINTR) {
  }
  return r;
}

int open_flock_file(const std::string& path, bool create) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0) throw_errno("open(flock file)");
  return fd;
}

void flock_retrying(int fd, int op) noexcept {
  while (::flock(fd, op) != 0 && errno == EINTR) {
  }
}
}  // namespace

const char* impl_name(Impl impl) noexcept {
  switch (impl) {
    case Impl::shmsem:
      return "shmsem";
    case Impl::shmsem_barging:
      return "shmsem_barging";
    case Impl::posix_sem:
      return "posix_sem";
    case Impl::sysv_undo:
      return "sysv_undo";
    case Impl::boost_ipc:
      return "boost_ipc";
    case Impl::flock:
      return "flock";
  }
  return "?";
}

bool crash_safe(Impl impl) noexcept {
  return is_shmsem(impl) || impl == Impl::sysv_undo || impl == Impl::flock;
}

bool counting(Impl impl) noexcept {
  return impl != Impl::flock;
}

// ---- POSIX sem_t ----------------------------------------------------------

PosixSem::PosixSem(int value) : sem_(static_cast<sem_t*>(map_shared(sizeof(sem_t)))) {
  if (::sem_init(sem_, /*pshared=*/1, static_cast<unsigned>(value)) != 0) throw_errno("sem_init");
}
PosixSem::~PosixSem() {
  ::sem_destroy(sem_);
  unmap_shared(sem_, sizeof(sem_t));
}
int PosixSem::value() const noexcept {
  int v = 0;
  ::sem_getvalue(sem_, &v);
  return v;
}

// ---- System V semaphore with SEM_UNDO -------------------------------------

SysvSem::SysvSem(int value) : id_(::semget(IPC_PRIVATE, 1, IPC_CREAT | 0600)) {
  if (id_ < 0) throw_errno("semget");
  semun arg{};
  arg.val = value;
  if (::semctl(id_, 0, SETVAL, arg) != 0) throw_errno("semctl(SETVAL)");
}
SysvSem::~SysvSem() {
  ::semctl(id_, 0, IPC_RMID);
}
void SysvSem::acquire(int n) noexcept {
  semop_undo(id_, -n, 0);
}
void SysvSem::release(int n) noexcept {
  semop_undo(id_, n, 0);
}
bool SysvSem::try_acquire(int n) noexcept {
  return semop_undo(id_, -n, IPC_NOWAIT) == 0;
}
int SysvSem::value() const noexcept {
  return ::semctl(id_, 0, GETVAL);
}

// ---- boost::interprocess::interprocess_semaphore --------------------------

BoostSem::BoostSem(int value) {
  void* p = map_shared(sizeof(boost::interprocess::interprocess_semaphore));
  sem_ = new (p) boost::interprocess::interprocess_semaphore(static_cast<unsigned>(value));
}
BoostSem::~BoostSem() {
  sem_->~interprocess_semaphore();
  unmap_shared(sem_, sizeof(boost::interprocess::interprocess_semaphore));
}

// ---- flock(2) --------------------------------------------------------------

FlockSem::FlockSem(int capacity)
    : path_("/dev/shm/" + unique_name("flock")), fd_(open_flock_file(path_, true)) {
  if (capacity != 1) throw std::invalid_argument("flock is a lock: capacity must be 1");
}
FlockSem::~FlockSem() {
  ::close(fd_);
  ::unlink(path_.c_str());
}
void FlockSem::acquire() noexcept {
  flock_retrying(fd_, LOCK_EX);
}
void FlockSem::release() noexcept {
  flock_retrying(fd_, LOCK_UN);
}
bool FlockSem::try_acquire() noexcept {
  return ::flock(fd_, LOCK_EX | LOCK_NB) == 0;
}

// ---- Process-shared forms --------------------------------------------------

bool is_shmsem(Impl impl) noexcept {
  return impl == Impl::shmsem || impl == Impl::shmsem_barging;
}

shmsem::Options options_of(Impl impl) {
  shmsem::Options options;
  options.fairness = impl == Impl::shmsem ? shmsem::Fairness::fifo : shmsem::Fairness::barging;
  return options;
}

namespace {

class ShmsemContender final : public Contender {
 public:
  ShmsemContender(const std::string& key, int capacity, Impl impl)
      : sem_(shmsem::Semaphore::open(key, capacity, options_of(impl))) {
    // The policy is the creator's: a segment made with the other one would
    // be measured under this one's name. fairness() reads the segment's
    // header, so the short-lived rows, which time the open, pay no more.
    if (const shmsem::Fairness made = sem_.fairness(); made != options_of(impl).fairness)
      throw std::runtime_error(key + " was created with fairness " + shmsem::to_string(made));
  }
  void acquire() override { held_ = sem_.acquire(1); }
  void release() override { held_.release(); }

 private:
  shmsem::Semaphore sem_;
  shmsem::Permit held_;
};

class ShmsemShared final : public SharedSemaphore {
 public:
  ShmsemShared(int capacity, std::string_view tag, Impl impl)
      : key_(tag), capacity_(capacity), impl_(impl) {}
  std::unique_ptr<Contender> join() override {
    return std::make_unique<ShmsemContender>(key_.str(), capacity_, impl_);
  }

 private:
  ScopedKey key_;  // the segment is created by the first child that joins
  int capacity_;
  Impl impl_;
};

class PosixContender final : public Contender {
 public:
  explicit PosixContender(sem_t* s) : sem_(s) {}
  void acquire() override {
    while (::sem_wait(sem_) != 0) {
    }
  }
  void release() override { ::sem_post(sem_); }

 private:
  sem_t* sem_;
};

class PosixShared final : public SharedSemaphore {
 public:
  explicit PosixShared(int capacity) : sem_(capacity) {}
  std::unique_ptr<Contender> join() override {
    return std::make_unique<PosixContender>(sem_.get());
  }

 private:
  PosixSem sem_;
};

class SysvContender final : public Contender {
 public:
  explicit SysvContender(int id) : id_(id) {}
  void acquire() override { semop_undo(id_, -1, 0); }
  void release() override { semop_undo(id_, 1, 0); }

 private:
  int id_;
};

class SysvShared final : public SharedSemaphore {
 public:
  explicit SysvShared(int capacity) : sem_(capacity) {}
  std::unique_ptr<Contender> join() override { return std::make_unique<SysvContender>(sem_.id()); }

 private:
  SysvSem sem_;
};

class BoostContender final : public Contender {
 public:
  explicit BoostContender(boost::interprocess::interprocess_semaphore* s) : sem_(s) {}
  void acquire() override { sem_->wait(); }
  void release() override { sem_->post(); }

 private:
  boost::interprocess::interprocess_semaphore* sem_;
};

class BoostShared final : public SharedSemaphore {
 public:
  explicit BoostShared(int capacity) : sem_(capacity) {}
  std::unique_ptr<Contender> join() override {
    return std::make_unique<BoostContender>(sem_.get());
  }

 private:
  BoostSem sem_;
};

class FlockContender final : public Contender {
 public:
  explicit FlockContender(const std::string& path) : fd_(open_flock_file(path, false)) {}
  ~FlockContender() override { ::close(fd_); }
  void acquire() override { flock_retrying(fd_, LOCK_EX); }
  void release() override { flock_retrying(fd_, LOCK_UN); }

 private:
  int fd_;
};

class FlockShared final : public SharedSemaphore {
 public:
  explicit FlockShared(int capacity) : file_(capacity) {}
  std::unique_ptr<Contender> join() override {
    return std::make_unique<FlockContender>(file_.path());
  }

 private:
  FlockSem file_;
};

}  // namespace

std::unique_ptr<SharedSemaphore> make_shared_semaphore(Impl impl, int capacity,
                                                       std::string_view tag) {
  switch (impl) {
    case Impl::shmsem:
    case Impl::shmsem_barging:
      return std::make_unique<ShmsemShared>(capacity, tag, impl);
    case Impl::posix_sem:
      return std::make_unique<PosixShared>(capacity);
    case Impl::sysv_undo:
      return std::make_unique<SysvShared>(capacity);
    case Impl::boost_ipc:
      return std::make_unique<BoostShared>(capacity);
    case Impl::flock:
      return std::make_unique<FlockShared>(capacity);
  }
  throw std::invalid_argument("unknown implementation");
}

}  // namespace shmsem_bench
