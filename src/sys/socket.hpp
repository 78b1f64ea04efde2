// sys/socket.hpp: the system calls the Redis backend makes itself (hiredis
// makes the rest): a send that cannot raise SIGPIPE, and the eventfd and
// poll(2) with which its keeper thread sleeps until poked or until one of
// its sockets is readable.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstddef>

namespace shmsem::sys {

/// send(2) with MSG_NOSIGNAL and MSG_DONTWAIT: a server that went away
/// gives EPIPE, not a SIGPIPE that would kill a host process that did not
/// ignore it, and a full socket buffer gives EAGAIN at once (the caller
/// polls for POLLOUT within its own deadline), whatever timeout the socket
/// has. Returns what send(2) returns, errno set on -1.
ssize_t send_nosignal(int fd, const void* data, std::size_t size) noexcept;

/// A non-blocking, close-on-exec eventfd, or -1 with errno set.
int event_open() noexcept;

/// Makes `fd` readable (adds 1 to its counter). A full counter or a closed
/// fd is ignored: a poke that cannot land means one is already pending.
void event_poke(int fd) noexcept;

/// Resets the counter of a readable `fd`, so that the next poll sleeps.
void event_drain(int fd) noexcept;

/// poll(2) over `n` descriptors, for at most `timeout_ms` (-1: no limit).
/// The number ready, 0 on timeout, -1 on error (EINTR included).
int poll_fds(pollfd* fds, std::size_t n, int timeout_ms) noexcept;

}  // namespace shmsem::sys
