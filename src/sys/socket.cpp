// sys/socket.cpp: the Redis backend's own socket, eventfd and poll calls
// (see socket.hpp).

#include "sys/socket.hpp"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace shmsem::sys {

ssize_t send_nosignal(int fd, const void* data, std::size_t size) noexcept {
  return ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
}

int event_open() noexcept {
  return ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

void event_poke(int fd) noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto r = ::write(fd, &one, sizeof one);
}

void event_drain(int fd) noexcept {
  std::uint64_t v;
  [[maybe_unused]] const auto r = ::read(fd, &v, sizeof v);
}

int poll_fds(pollfd* fds, std::size_t n, int timeout_ms) noexcept {
  return ::poll(fds, static_cast<nfds_t>(n), timeout_ms);
}

}  // namespace shmsem::sys
