"""The shmsem API as a typed program sees it: `mypy --strict` checks this
file against the package's stubs (ctest python.mypy), so that the stubs
keep the shapes below type-correct.

    PYTHONPATH=build/python python3 examples/python/typed.py KEY
"""

from __future__ import annotations

import asyncio
import sys
from typing import Optional

import shmsem


def read_under_seat(sem: shmsem.Semaphore, path: str) -> bytes:
    # Returns from inside the block: Permit.__exit__ never swallows an
    # exception, so no return is missing after it.
    with sem.acquire(timeout=5.0):
        with open(path, "rb") as f:
            return f.read()


def port_of_threading(sem: shmsem.Semaphore) -> int:
    # The threading.Semaphore idiom: the seat stays held until release().
    if sem.acquire(timeout=5.0):
        try:
            return sem.used
        finally:
            sem.release()
    return -1


def with_the_semaphore(sem: shmsem.Semaphore) -> int:
    with sem:
        return sem.used


def cancellable(sem: shmsem.Semaphore, token: shmsem.CancelToken) -> Optional[int]:
    try:
        with sem.acquire(timeout=5.0, cancel=token) as permit:
            return permit.weight
    except shmsem.AcquisitionError as e:
        if e.reason == "cancelled":
            return None
        raise


def make_jobs(key: str) -> tuple[int, Optional[int]]:
    @shmsem.bounded(key, permits=1)
    def always(n: int) -> int:
        return n + 1

    @shmsem.bounded(key, permits=1, on_unavailable="skip")
    def maybe(n: int) -> int:
        return n * 2

    # A skipped call returns None, so its result is not an int: the ignore
    # below is needed (and --strict flags it if the stubs ever forget that).
    as_int: int = maybe(2)  # type: ignore[assignment]
    return always(1), maybe(as_int)


async def under_asyncio(sem: shmsem.Semaphore, key: str) -> int:
    async with sem.acquire_async(timeout=5.0) as permit:
        weight = permit.weight
    task = asyncio.create_task(sem.acquire_async(timeout=5.0))
    second = await task
    second.release()

    @shmsem.bounded(key, permits=1, on_unavailable="skip")
    async def job() -> int:
        return 3

    result: Optional[int] = await job()
    return weight + (result or 0)


def main(key: str) -> None:
    sem = shmsem.Semaphore(key, permits=2)
    try:
        print(port_of_threading(sem), with_the_semaphore(sem),
              cancellable(sem, shmsem.CancelToken()), make_jobs(key + ".job"),
              asyncio.run(under_asyncio(sem, key + ".async")))
    finally:
        for k in (key, key + ".job", key + ".async"):
            shmsem.Semaphore.remove(k)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "example.typed")
