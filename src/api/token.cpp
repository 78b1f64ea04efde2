// token.cpp: Semaphore::inheritable_liveness_fd, which lets a process tree
// share its starter's liveness token, so that the starter's seats are held
// for as long as any process of the tree lives (what `shmsem run` needs to
// hold a seat for a whole pipeline, as flock(1) does).
#include <shmsem/semaphore.hpp>

#include <cerrno>
#include <stdexcept>
#include <system_error>

#include "base/handle.hpp"
#include "shm/segment.hpp"

namespace shmsem {

int Semaphore::inheritable_liveness_fd() const {
  if (!capabilities().process_liveness)
    throw std::logic_error("shmsem: inheritable_liveness_fd() of '" + std::string(key()) +
                           "': its holder is this process's session with the server, which a "
                           "descriptor cannot carry to other processes");
  const detail::attachment& a = *h_->att;
  const std::uint32_t self = a.self.load(std::memory_order_relaxed);
  if (self == detail::kNoSelf)
    throw std::logic_error("shmsem: inheritable_liveness_fd() of '" + a.key +
                           "': this process has not acquired through this key, so it holds no "
                           "liveness token yet");
  // Before the descriptor exists: from now on this process's exit does not
  // end its seats, the tree's does (attachment::exiting_alone()).
  a.holders[self].token_shared.store(1, std::memory_order_release);
  const int fd = a.tokens->dup_description(self);
  if (fd < 0)
    throw std::system_error(
        errno, std::system_category(),
        "shmsem: cannot duplicate the descriptor of " + a.tokens->path_of(self));
  return fd;
}

}  // namespace shmsem
