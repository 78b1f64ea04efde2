"""shmsem.bounded: a decorator that holds one seat of a fleet-wide semaphore
while the function runs.

    @shmsem.bounded("export:{tenant}", permits=1, on_unavailable="skip")
    def export(tenant): ...

The key is a str.format template filled from the call's arguments: {name}
is the argument of that name (positional or keyword, defaults applied),
{0} the first positional argument; attribute and index lookups
({user.id}, {0[id]}) work as in str.format.
"""

from __future__ import annotations

import functools
import inspect
import logging
import string
import threading
from typing import Any, Callable, Dict, Optional, Union

from ._types import AcquisitionError, SegmentError, UntrustedOwnerError

_log = logging.getLogger("shmsem")

# One handle per key and process, shared by every bounded function.
_handles: Dict[str, Any] = {}
_handles_lock = threading.Lock()
_warned_fail_open: set = set()


def _semaphore(key: str, permits: int):
    from . import Semaphore

    sem = _handles.get(key)
    if sem is None:
        with _handles_lock:
            sem = _handles.get(key)
            if sem is None:
                sem = _handles[key] = Semaphore(key, permits)
    return sem


def _check_template(template: str, fn: Callable) -> None:
    """Raises ValueError now for a template the function's arguments cannot fill."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise ValueError(f"shmsem.bounded: bad key template {template!r}: {e}") from None
    params = inspect.signature(fn).parameters.values()
    names = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    var_positional = any(p.kind == p.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind == p.VAR_KEYWORD for p in params)
    for field in fields:
        head = field
        for sep in ".[":
            head = head.split(sep, 1)[0]
        if head == "":
            raise ValueError(f"shmsem.bounded: key template {template!r} has {{}} without a name "
                             "or index; write {0} or {name}")
        if head.isdigit():
            if int(head) >= positional and not var_positional:
                raise ValueError(f"shmsem.bounded: key template {template!r} names argument "
                                 f"{head}, but {fn.__qualname__} takes {positional} positional")
        elif head not in names and not var_keyword:
            raise ValueError(f"shmsem.bounded: key template {template!r} names {head!r}, which "
                             f"is not a parameter of {fn.__qualname__}")


def bounded(key: str, permits: int = 1, *, timeout: Optional[float] = None,
            ttl: Optional[float] = None, auto_renew: bool = False,
            on_unavailable: Union[str, Callable[[str, str], Any]] = "raise",
            fail_mode: str = "open") -> Callable[[Callable], Callable]:
    """Decorates a function so that each call holds one seat of the semaphore
    `key` (a str.format template over the call's arguments) while it runs.

    permits: the capacity used when a call creates the semaphore (use the
    same value everywhere; an existing semaphore keeps its capacity).
    timeout, ttl, auto_renew: as in Semaphore.acquire(), except that
    timeout=None waits for a seat only under on_unavailable="raise": with
    "skip" or a callable, a call without a timeout does not wait (one
    attempt, as timeout=0).
    on_unavailable: what a call does when it cannot get its seat (timeout,
    cancelled, shutdown, n > capacity): "raise" the AcquisitionError, "skip"
    (return None without running the function), or a callable
    (key, reason) that raises the caller's own exception.
    fail_mode: when the segment cannot be opened at all (permission denied,
    /dev/shm full): "open" runs the function without a bound and logs a
    warning once per key, "closed" treats it as unavailable (reason "error").

    The template is checked now: ValueError if it names an argument the
    function does not have. Works on coroutine functions too (the seat is
    awaited with acquire_async).
    """
    if not isinstance(permits, int) or permits < 1:
        raise ValueError(f"shmsem.bounded: permits must be an int >= 1, got {permits!r}")
    if not (on_unavailable in ("raise", "skip") or callable(on_unavailable)):
        raise ValueError("shmsem.bounded: on_unavailable must be 'raise', 'skip' or a callable, "
                         f"got {on_unavailable!r}")
    if fail_mode not in ("open", "closed"):
        raise ValueError(f"shmsem.bounded: fail_mode must be 'open' or 'closed', got {fail_mode!r}")
    # A policy for "no seat" means the caller expects not to get one at
    # times: without a timeout such a call does not wait (as C++ bounded()).
    if timeout is None and on_unavailable != "raise":
        timeout = 0

    def decorate(fn: Callable) -> Callable:
        _check_template(key, fn)
        signature = inspect.signature(fn)
        literal = not any(f is not None for _, f, _, _ in string.Formatter().parse(key))

        def key_of(args, kwargs) -> str:
            if literal:
                return key
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            named = dict(bound.arguments)
            for p in signature.parameters.values():
                if p.kind == p.VAR_KEYWORD:
                    named.update(named.pop(p.name, {}))
            return key.format(*bound.args, **named)

        def open_or_fallback(k: str):
            """The semaphore, or None to run unbounded (fail_mode "open")."""
            try:
                return _semaphore(k, permits)
            except SegmentError as e:
                # Any local user can create the key's file first: a
                # segment of an untrusted owner never switches the bound off.
                if fail_mode == "open" and not isinstance(e, UntrustedOwnerError):
                    if k not in _warned_fail_open:
                        _warned_fail_open.add(k)
                        _log.warning("shmsem.bounded: running %s without a bound: %s",
                                     fn.__qualname__, e)
                    return None
                raise AcquisitionError(f"shmsem: cannot open semaphore '{k}': {e}",
                                       "error") from e

        def unavailable(k: str, e: AcquisitionError) -> None:
            if on_unavailable == "skip":
                return None
            if callable(on_unavailable):
                on_unavailable(k, e.reason)
            raise e

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                k = key_of(args, kwargs)
                try:
                    sem = open_or_fallback(k)
                except AcquisitionError as e:
                    return unavailable(k, e)
                if sem is None:
                    return await fn(*args, **kwargs)
                try:
                    permit = await sem.acquire_async(timeout=timeout, ttl=ttl,
                                                     auto_renew=auto_renew)
                except AcquisitionError as e:
                    return unavailable(k, e)
                with permit:
                    return await fn(*args, **kwargs)
            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            k = key_of(args, kwargs)
            try:
                sem = open_or_fallback(k)
            except AcquisitionError as e:
                return unavailable(k, e)
            if sem is None:
                return fn(*args, **kwargs)
            try:
                permit = sem.acquire(timeout=timeout, ttl=ttl, auto_renew=auto_renew)
            except AcquisitionError as e:
                return unavailable(k, e)
            with permit:
                return fn(*args, **kwargs)
        return wrapper

    return decorate
