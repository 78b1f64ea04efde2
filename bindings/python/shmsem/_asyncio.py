"""Semaphore.acquire_async: acquiring from asyncio without blocking the loop.

An uncontended acquire happens on the loop's thread at once. Otherwise a
helper thread waits in the semaphore's queue (the library blocks on a
futex, which an event loop cannot poll) and hands the permit to the loop.
Cancelling the awaiting task withdraws the request; a seat granted as the
cancel lands is given back.
"""

from __future__ import annotations

import asyncio
import collections.abc
import threading
from typing import Any, Optional

from . import _shmsem


async def _acquire(sem: Any, n: int, timeout: Optional[float], ttl: Optional[float],
                   auto_renew: bool) -> Any:
    permit = sem._acquire_now(n, ttl, auto_renew)
    if permit is not None:
        return permit
    if timeout == 0:
        return sem.acquire(n, timeout=0, ttl=ttl, auto_renew=auto_renew)  # raises a timeout
    loop = asyncio.get_running_loop()
    token = _shmsem.CancelToken()
    done = loop.create_future()
    abandoned = False

    def settle(permit, error):  # on the loop
        if abandoned or done.done():
            if permit is not None:
                permit._release_quietly()
            return
        done.set_result((permit, error))

    def wait():  # in the helper thread
        permit = error = None
        try:
            permit = sem.acquire(n, timeout, ttl, auto_renew, cancel=token)
        except BaseException as e:  # delivered to the awaiting task
            error = e
        try:
            loop.call_soon_threadsafe(settle, permit, error)
        except RuntimeError:  # the loop is closed: nobody will take the permit
            if permit is not None:
                permit._release_quietly()

    threading.Thread(target=wait, name=f"shmsem acquire {sem.key}", daemon=True).start()
    try:
        permit, error = await asyncio.shield(done)
    except asyncio.CancelledError:
        token.cancel()
        try:
            # Wait for the withdrawal, so that the request is gone from the
            # queue when the task's cancellation completes.
            permit, _ = await done
        except asyncio.CancelledError:
            abandoned = True  # cancelled again: settle() gives back any seat
            raise
        if permit is not None:
            permit._release_quietly()
        raise
    if error is not None:
        raise error
    return permit


class AcquireAsync(collections.abc.Coroutine):
    """What Semaphore.acquire_async() returns: a coroutine whose result is a
    Permit (await it, or hand it to asyncio.create_task() or
    TaskGroup.create_task()), or an async context manager that releases the
    permit on exit. The request starts when it is first awaited or run."""

    __slots__ = ("_sem", "_n", "_timeout", "_ttl", "_auto_renew", "_permit", "_coro")

    def __init__(self, sem: Any, n: int, timeout: Optional[float], ttl: Optional[float],
                 auto_renew: bool) -> None:
        if n < 1:
            raise ValueError(f"shmsem: n must be >= 1, got {n}")
        self._sem = sem
        self._n = n
        self._timeout = timeout
        self._ttl = ttl
        self._auto_renew = auto_renew
        self._permit = None
        self._coro = None

    def _coroutine(self):
        if self._coro is None:
            self._coro = _acquire(self._sem, self._n, self._timeout, self._ttl, self._auto_renew)
        return self._coro

    def __await__(self):
        return self._coroutine().__await__()

    def send(self, value):
        return self._coroutine().send(value)

    def throw(self, typ, val=None, tb=None):
        if val is None and tb is None:
            return self._coroutine().throw(typ)
        return self._coroutine().throw(typ, val, tb)

    def close(self):
        if self._coro is not None:
            self._coro.close()

    async def __aenter__(self):
        self._permit = await self
        return self._permit

    async def __aexit__(self, exc_type, exc, tb) -> None:
        permit, self._permit = self._permit, None
        if permit is not None:
            permit.__exit__(exc_type, exc, tb)


def acquire_async(self, n: int = 1, timeout: Optional[float] = None,
                  ttl: Optional[float] = None, auto_renew: bool = False) -> AcquireAsync:
    """Acquires `n` seats from asyncio without blocking the event loop.

    ``permit = await sem.acquire_async(timeout=5.0)``, or
    ``async with sem.acquire_async(timeout=5.0): ...``. The arguments are
    those of acquire(). Cancelling the awaiting task withdraws the request
    from the queue before the cancellation completes, and a seat granted as
    the cancel lands goes back: no seat leaks.
    """
    return AcquireAsync(self, n, timeout, ttl, auto_renew)
