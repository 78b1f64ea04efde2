# Type stubs of the shmsem package (the compiled classes have no
# annotations of their own). Keep in step with bindings/python/module.cpp and
# shmsem/*.py; tests/python/test_typing.py checks that they agree.
from types import TracebackType
from typing import (Any, Callable, Coroutine, Dict, Generator, Iterable, List, Literal, Optional,
                    ParamSpec, Protocol, Type, TypeVar, Union, overload)

__version__: str

_F = TypeVar("_F", bound=Callable[..., Any])
_P = ParamSpec("_P")
_R = TypeVar("_R")

class Error(Exception): ...

class AcquisitionError(Error):
    reason: str
    def __init__(self, message: str, reason: str = ...) -> None: ...

class AcquisitionTimeoutError(AcquisitionError, TimeoutError):
    def __init__(self, message: str, reason: str = ...) -> None: ...

class PermitNotHeldError(Error): ...
class ExtensionError(Error): ...

class SegmentError(Error):
    code: int
    category: str
    def __init__(self, message: str, code: int = ..., category: str = ...) -> None: ...

class UntrustedOwnerError(SegmentError, PermissionError): ...

class Holder:
    pid: int
    weight: int
    permit_id: int
    acquired_at: float
    expires_at: Optional[float]
    state: str
    foreign_namespace: bool
    host: str

class Stats:
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
    wait: Dict[str, Any]
    hold: Dict[str, Any]
    def as_dict(self) -> Dict[str, Any]: ...

class CancelToken:
    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...

class Permit:
    def release(self) -> None: ...
    def extend(self, ttl: float) -> None: ...
    @property
    def is_held(self) -> bool: ...
    @property
    def id(self) -> int: ...
    @property
    def weight(self) -> int: ...
    @property
    def fencing_token(self) -> int: ...
    @property
    def key(self) -> str: ...
    @property
    def ttl(self) -> Optional[float]: ...
    @property
    def acquired_at(self) -> float: ...
    @property
    def expires_at(self) -> Optional[float]: ...
    @property
    def auto_renewing(self) -> bool: ...
    def stop_auto_renew(self) -> None: ...
    def __enter__(self) -> "Permit": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Literal[False]: ...

class AcquireAsync(Coroutine[Any, Any, Permit]):
    def __await__(self) -> Generator[Any, None, Permit]: ...
    def send(self, value: Any) -> Any: ...
    def throw(self, typ: Any, val: Any = ..., tb: Optional[TracebackType] = ...) -> Any: ...
    def close(self) -> None: ...
    async def __aenter__(self) -> Permit: ...
    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

class Semaphore:
    def __init__(
        self,
        key: str,
        permits: int,
        *,
        mode: int = ...,
        ttl: Optional[float] = ...,
        auto_renew: bool = ...,
        open_timeout: float = ...,
        trusted_owners: Optional[Iterable[Union[str, int]]] = ...,
        session_timeout: Optional[float] = ...,
        connect_timeout: Optional[float] = ...,
        fencing: bool = ...,
        fairness: Optional[str] = ...,
    ) -> None: ...
    @staticmethod
    def attach(
        key: str, *, trusted_owners: Optional[Iterable[Union[str, int]]] = ...
    ) -> "Semaphore": ...
    def acquire(
        self,
        n: int = ...,
        timeout: Optional[float] = ...,
        ttl: Optional[float] = ...,
        auto_renew: bool = ...,
        cancel: Optional[CancelToken] = ...,
    ) -> Permit: ...
    def release(self) -> None: ...
    def __enter__(self) -> Permit: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Literal[False]: ...
    def try_acquire(
        self, n: int = ..., ttl: Optional[float] = ..., auto_renew: bool = ...
    ) -> Optional[Permit]: ...
    def acquire_async(
        self,
        n: int = ...,
        timeout: Optional[float] = ...,
        ttl: Optional[float] = ...,
        auto_renew: bool = ...,
    ) -> AcquireAsync: ...
    @property
    def key(self) -> str: ...
    @property
    def capacity(self) -> int: ...
    @property
    def fairness(self) -> str: ...
    @property
    def used(self) -> int: ...
    @property
    def available(self) -> int: ...
    @property
    def waiters(self) -> int: ...
    @property
    def utilization(self) -> float: ...
    def set_capacity(self, permits: int) -> None: ...
    def force_release_all(self) -> int: ...
    def wait_idle(self, timeout: Optional[float] = ...) -> bool: ...
    def reap(self) -> int: ...
    def holders(self) -> List[Holder]: ...
    def stats(self) -> Stats: ...
    def shutdown(self) -> None: ...
    @staticmethod
    def remove(key: str) -> bool: ...
    @staticmethod
    def remove_if_unused(key: str) -> bool: ...
    @staticmethod
    def list(server: Optional[str] = ...) -> List[str]: ...
    @staticmethod
    def segment_path(key: str) -> str: ...

class _SkippingDecorator(Protocol):
    # What bounded(..., on_unavailable="skip") returns: a skipped call
    # returns None (a coroutine function's coroutine returns None).
    @overload
    def __call__(  # type: ignore[misc]
        self, fn: Callable[_P, Coroutine[Any, Any, _R]]
    ) -> Callable[_P, Coroutine[Any, Any, Optional[_R]]]: ...
    @overload
    def __call__(self, fn: Callable[_P, _R]) -> Callable[_P, Optional[_R]]: ...

@overload
def bounded(
    key: str,
    permits: int = ...,
    *,
    timeout: Optional[float] = ...,
    ttl: Optional[float] = ...,
    auto_renew: bool = ...,
    on_unavailable: Literal["skip"],
    fail_mode: Literal["open", "closed"] = ...,
) -> _SkippingDecorator: ...
@overload
def bounded(
    key: str,
    permits: int = ...,
    *,
    timeout: Optional[float] = ...,
    ttl: Optional[float] = ...,
    auto_renew: bool = ...,
    on_unavailable: Union[Literal["raise"], Callable[[str, str], Any]] = ...,
    fail_mode: Literal["open", "closed"] = ...,
) -> Callable[[_F], _F]: ...
def shutdown_all() -> None: ...
