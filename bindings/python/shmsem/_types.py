"""The exceptions of shmsem and the records it returns (Holder, Stats).

The compiled module raises these classes; they live in Python so that they
can subclass the built-in exceptions (a timeout is also a TimeoutError) and
pickle across processes (multiprocessing).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

REASONS = ("timeout", "cancelled", "shutdown", "exceeds_capacity", "error")


class Error(Exception):
    """Base of every shmsem exception."""


class AcquisitionError(Error):
    """acquire() did not obtain the seats.

    .reason says why: "timeout", "cancelled", "shutdown", "exceeds_capacity"
    (n is larger than the capacity) or "error" (the segment failed). An
    AcquisitionError whose reason is "timeout" is also a TimeoutError.
    """

    def __init__(self, message: str, reason: str = "error") -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self):
        return (type(self), (str(self), self.reason))


class AcquisitionTimeoutError(AcquisitionError, TimeoutError):
    """An AcquisitionError with reason "timeout": the wait budget ran out."""

    def __init__(self, message: str, reason: str = "timeout") -> None:
        super().__init__(message, reason)


class PermitNotHeldError(Error):
    """release() found the seats already lost (TTL ran out, reaped as a dead
    holder's, or force-released): for that period the bound was not held."""


class ExtensionError(Error):
    """extend() found the seats already lost."""


class SegmentError(Error):
    """The semaphore's segment cannot be used: not a segment, another layout,
    permission denied, /dev/shm full, or a system call failed.

    .code is the error value and .category its category ("shmsem" or
    "system": then .code is the errno).
    """

    def __init__(self, message: str, code: int = 0, category: str = "shmsem") -> None:
        super().__init__(message)
        self.code = code
        self.category = category

    def __reduce__(self):
        return (type(self), (str(self), self.code, self.category))


class UntrustedOwnerError(SegmentError, PermissionError):
    """Another user owns the segment, and this process does not trust them.

    /dev/shm is writable by every user, so anyone could have created the
    file first, with a capacity of their choosing. Accepted are segments of
    this user or root, a segment that others cannot write (for a process
    that is not root), and those of the users named in trusted_owners
    (Semaphore(..., trusted_owners=["postgres"])). Also a PermissionError.
    """


@dataclasses.dataclass(frozen=True)
class Holder:
    """One lease in the segment, as Semaphore.holders() reports it.

    Times are on the time.monotonic() clock. state is "alive", "dead" (the
    process is gone, or on Redis its session lapsed; the seats will be
    reaped) or "expired" (the TTL ran out).
    """

    pid: int
    """The holder's pid in this PID namespace; 0 if it is in another one.
    On Redis, its pid on its own host."""
    weight: int
    permit_id: int
    acquired_at: float
    expires_at: Optional[float]
    state: str
    foreign_namespace: bool
    host: str = ""
    """On Redis, the holder's host name ($SHMSEM_HOST if it set one); "" on
    shared memory, whose holders are all on this host."""


@dataclasses.dataclass(frozen=True)
class Stats:
    """Fleet-wide counters kept in the segment since it was created.

    Leases are counted, not seats, except reclaimed_seats. wait and hold are
    histograms: {"bounds": [seconds...], "counts": [per bucket, the last one
    above the last bound], "sum": seconds, "count": n}.
    """

    acquired: int
    released: int
    timeouts: int
    cancelled: int
    shutdowns: int
    rejected: int
    try_failures: int
    reaped: int
    expired: int
    force_released: int
    reclaimed_seats: int
    recoveries: int
    wait: dict
    hold: dict

    def as_dict(self) -> dict:
        """The counters as a plain dict."""
        return dataclasses.asdict(self)
