// bench/peers.hpp: the semaphores shmsem is measured against, each set up
// the way a fleet of processes would share it:
//   posix_sem  a process-shared sem_t in a MAP_SHARED mapping (sem_wait/sem_post)
//   sysv_undo  a System V semaphore, every semop with SEM_UNDO
//   boost_ipc  boost::interprocess::interprocess_semaphore in a MAP_SHARED mapping
//   flock      flock(2) on a file in /dev/shm (a lock: capacity 1 only)
// and shmsem in both fairness policies:
//   shmsem          a segment created with Fairness::fifo
//   shmsem_barging  a segment created with Fairness::barging (the default)
//
// The concrete classes serve the single-thread hot-path cases, where a
// virtual call would be a measurable share of a 15 ns operation. The
// SharedSemaphore/Contender pair serves the cases that fork processes, where
// it is not.
#pragma once

#include <semaphore.h>

#include <boost/interprocess/sync/interprocess_semaphore.hpp>
#include <chrono>
#include <memory>
#include <shmsem/options.hpp>
#include <string>
#include <string_view>

namespace shmsem_bench {

enum class Impl { shmsem, shmsem_barging, posix_sem, sysv_undo, boost_ipc, flock };
/// shmsem and its peers, as the cross-process cases compare them. The
/// shmsem of these cases is fifo (Impl::shmsem); barging, the default, only
/// changes who gets a contended seat, so it runs only in the cases that
/// contend (contended.cpp, fleet.cpp).
inline constexpr Impl kAllImpls[] = {Impl::shmsem, Impl::posix_sem, Impl::sysv_undo,
                                     Impl::boost_ipc, Impl::flock};

/// The name of an implementation in benchmark names: "shmsem", "posix_sem", ...
const char* impl_name(Impl impl) noexcept;
/// Whether `impl` is shmsem (either policy).
bool is_shmsem(Impl impl) noexcept;
/// The options a shmsem implementation creates its segment with (its
/// fairness); `impl` must be one (is_shmsem()).
shmsem::Options options_of(Impl impl);
/// Whether the kernel (or the library) gives a killed holder's seat back.
bool crash_safe(Impl impl) noexcept;
/// Whether it can hold more than one seat (flock cannot).
bool counting(Impl impl) noexcept;

/// Process-shared sem_t in an anonymous shared mapping.
class PosixSem {
 public:
  explicit PosixSem(int value);
  ~PosixSem();
  PosixSem(const PosixSem&) = delete;
  PosixSem& operator=(const PosixSem&) = delete;
  void acquire() noexcept {
    while (sem_wait(sem_) != 0) {
    }
  }
  void release() noexcept { sem_post(sem_); }
  bool try_acquire() noexcept { return sem_trywait(sem_) == 0; }
  int value() const noexcept;
  sem_t* get() const noexcept { return sem_; }

 private:
  sem_t* sem_;
};

/// One System V semaphore; every operation carries SEM_UNDO.
class SysvSem {
 public:
  explicit SysvSem(int value);
  ~SysvSem();
  SysvSem(const SysvSem&) = delete;
  SysvSem& operator=(const SysvSem&) = delete;
  void acquire(int n = 1) noexcept;
  void release(int n = 1) noexcept;
  bool try_acquire(int n = 1) noexcept;
  int value() const noexcept;
  int id() const noexcept { return id_; }

 private:
  int id_;
};

/// boost::interprocess::interprocess_semaphore in an anonymous shared mapping.
class BoostSem {
 public:
  explicit BoostSem(int value);
  ~BoostSem();
  BoostSem(const BoostSem&) = delete;
  BoostSem& operator=(const BoostSem&) = delete;
  void acquire() { sem_->wait(); }
  void release() { sem_->post(); }
  bool try_acquire() { return sem_->try_wait(); }
  boost::interprocess::interprocess_semaphore* get() const noexcept { return sem_; }

 private:
  boost::interprocess::interprocess_semaphore* sem_;
};

/// flock(2) on a file in /dev/shm. Each user opens its own descriptor: a
/// flock belongs to the open file description, so threads or processes
/// sharing one descriptor would share the lock.
class FlockSem {
 public:
  /// Creates the file; `capacity` must be 1.
  explicit FlockSem(int capacity);
  ~FlockSem();
  FlockSem(const FlockSem&) = delete;
  FlockSem& operator=(const FlockSem&) = delete;
  void acquire() noexcept;
  void release() noexcept;
  bool try_acquire() noexcept;
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  int fd_;
};

/// One participant's view of a shared semaphore, made in the process and
/// thread that uses it.
class Contender {
 public:
  virtual ~Contender() = default;
  /// Blocks until one seat is held.
  virtual void acquire() = 0;
  virtual void release() = 0;
};

/// A semaphore of capacity `capacity` that forked children share. Create it
/// in the parent before forking; each child calls join() in its own
/// process (shmsem children open the key themselves, so a child never uses a
/// handle or mapping it inherited). Only the creating process may destroy it.
class SharedSemaphore {
 public:
  virtual ~SharedSemaphore() = default;
  virtual std::unique_ptr<Contender> join() = 0;
};

std::unique_ptr<SharedSemaphore> make_shared_semaphore(Impl impl, int capacity,
                                                       std::string_view tag);

}  // namespace shmsem_bench
