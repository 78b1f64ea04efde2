"""shmsem: a fleet-wide counting semaphore in shared memory.

At most N at a time across every process on this host that opens the same
key, whatever its language: Python, C (include/shmsem/shmsem.h) or C++.
Seats are leases: a holder that dies, even by SIGKILL, never leaks one.

    import shmsem
    gpu = shmsem.Semaphore("gpu", permits=2)
    with gpu.acquire(timeout=5.0):
        ...

The library's log lines go to logging.getLogger("shmsem").
"""

from __future__ import annotations

from . import _shmsem
from ._asyncio import AcquireAsync, acquire_async
from ._bounded import bounded
from ._shmsem import CancelToken, Permit, Semaphore, shutdown_all
from ._types import (AcquisitionError, AcquisitionTimeoutError, Error, ExtensionError, Holder,
                     PermitNotHeldError, SegmentError, Stats, UntrustedOwnerError)

# A method of Semaphore, written in Python (asyncio).
Semaphore.acquire_async = acquire_async


def _reopen(key, permits, options):
    """Unpickles a Semaphore: the other process opens the key itself, with
    the options it was opened with (attach() when permits is None). Seats
    are never carried over: they belong to the process that took them."""
    if permits is None:
        return Semaphore.attach(key, **options)
    return Semaphore(key, permits, **options)


# The public classes are shmsem.X wherever they are defined (repr, help, pickle
# of the exceptions goes through the same classes either way).
for _cls in (AcquireAsync, AcquisitionError, AcquisitionTimeoutError, CancelToken, Error,
             ExtensionError, Holder, Permit, PermitNotHeldError, SegmentError, Semaphore, Stats,
             UntrustedOwnerError):
    _cls.__module__ = __name__
del _cls

__version__ = _shmsem.runtime_version()

__all__ = [
    "AcquireAsync",
    "AcquisitionError",
    "AcquisitionTimeoutError",
    "CancelToken",
    "Error",
    "ExtensionError",
    "Holder",
    "Permit",
    "PermitNotHeldError",
    "SegmentError",
    "Semaphore",
    "Stats",
    "UntrustedOwnerError",
    "bounded",
    "shutdown_all",
]
