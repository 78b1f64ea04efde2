// forking.hpp: fork() and the library's process-local mutexes. A child has
// only the thread that forked, so a mutex another thread held at that
// moment would stay locked in the child for ever, and the data it guards
// could be half-changed. The fork handlers (process.cpp) take every such
// mutex before fork(), in the order below, and let go of them after it, in
// the parent and in the child. The order is the order in which the library
// nests them: the attachment registry, then the list of handles, then each
// handle's list of waits; the service caches, the logger, the fail-open
// warnings and the C ABI's asynchronous acquires are never held while
// another of these is taken. The library's background threads (the
// lifeline keeper, the renewer, the Redis clients and keepers) are not
// here: a child starts afresh with new ones and never touches the old.
#pragma once

namespace shmsem::detail {

/// Registers the fork handlers, once per process (process.cpp). Called
/// before a mutex below is first used.
void handle_fork_once();

/// The list of handles and each handle's list of waits (semaphore.cpp).
void lock_handles_for_fork() noexcept;
void unlock_handles_after_fork() noexcept;

/// The shards of every Service's cache (service.cpp).
void lock_services_for_fork() noexcept;
void unlock_services_after_fork() noexcept;

/// The library's logger (log.cpp).
void lock_log_for_fork() noexcept;
void unlock_log_after_fork() noexcept;

/// The keys a fail-open bounded() has warned about (bounded.cpp).
void lock_warnings_for_fork() noexcept;
void unlock_warnings_after_fork() noexcept;

/// The C ABI's asynchronous acquires in flight (c_api.cpp). The child
/// forgets them: their threads stayed in the parent.
void lock_async_acquires_for_fork() noexcept;
void unlock_async_acquires_after_fork(bool child) noexcept;

}  // namespace shmsem::detail
