"""acquire_async: awaits without blocking the loop; cancellation withdraws."""

import asyncio
import time

import pytest

import shmsem
from conftest import wait_until


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_await_and_async_with(key):
    s = shmsem.Semaphore(key, permits=2)

    async def main():
        p = await s.acquire_async(timeout=5.0)
        assert p.is_held and s.used == 1
        async with s.acquire_async(timeout=5.0) as q:
            assert q.is_held and s.used == 2
        assert not q.is_held
        p.release()

    run(main())
    assert s.used == 0


def test_waiting_does_not_block_the_loop(key):
    s = shmsem.Semaphore(key, permits=1)
    held = s.acquire()

    async def main():
        ticks = 0
        task = asyncio.create_task(_await(s.acquire_async(timeout=30)))
        while s.waiters == 0:
            ticks += 1
            await asyncio.sleep(0.001)
        start = ticks
        for _ in range(20):  # the loop keeps turning while the acquire waits
            await asyncio.sleep(0.001)
            ticks += 1
        assert not task.done() and ticks - start == 20
        held.release()
        p = await task
        assert p.is_held
        p.release()

    run(main())


async def _await(aw):
    return await aw


def test_timeout(key):
    s = shmsem.Semaphore(key, permits=1)
    held = s.acquire()

    async def main():
        with pytest.raises(shmsem.AcquisitionError) as e:
            await s.acquire_async(timeout=0.05)
        assert e.value.reason == "timeout" and isinstance(e.value, TimeoutError)
        with pytest.raises(TimeoutError):
            await s.acquire_async(timeout=0)

    run(main())
    held.release()


def test_cancelling_the_task_withdraws_the_request(key):
    s = shmsem.Semaphore(key, permits=1)
    held = s.acquire()

    async def main():
        task = asyncio.create_task(_await(s.acquire_async()))
        while s.waiters == 0:
            await asyncio.sleep(0.001)
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Withdrawn before the cancellation completed.
        assert s.waiters == 0
        print(f"a cancelled acquire_async left the queue in {(time.monotonic() - t0) * 1e3:.1f} ms")

    run(main())
    assert s.used == 1
    held.release()
    assert s.used == 0 and s.try_acquire() is not None
    assert s.stats().cancelled == 1


def test_cancellation_racing_with_grants_leaks_no_seat(key):
    s = shmsem.Semaphore(key, permits=1)

    async def one_round(i):
        held = s.acquire()
        task = asyncio.create_task(_await(s.acquire_async(timeout=30)))
        while s.waiters == 0:
            await asyncio.sleep(0)
        # Release and cancel in either order, so that some grants land as the
        # cancel does.
        if i % 2:
            held.release()
            task.cancel()
        else:
            task.cancel()
            held.release()
        try:
            p = await task
            p.release()
        except asyncio.CancelledError:
            pass

    async def main():
        for i in range(30):
            await one_round(i)

    run(main())
    wait_until(lambda: s.used == 0, what="every seat back")
    assert s.waiters == 0


def test_wait_for_timeout_cancels_cleanly(key):
    s = shmsem.Semaphore(key, permits=1)
    held = s.acquire()

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(_await(s.acquire_async()), 0.05)
        assert s.waiters == 0

    run(main())
    held.release()
    assert s.used == 0


def test_n_below_one_is_a_value_error(key):
    s = shmsem.Semaphore(key, permits=1)
    with pytest.raises(ValueError):
        s.acquire_async(n=0)


def test_create_task_and_task_group_take_acquire_async(key):
    s = shmsem.Semaphore(key, permits=2)

    async def main():
        first = await asyncio.create_task(s.acquire_async(timeout=5.0))
        async with asyncio.TaskGroup() as tg:
            second = tg.create_task(s.acquire_async(timeout=5.0))
        assert first.is_held and second.result().is_held and s.used == 2
        first.release()
        second.result().release()
        # A contended one, handed to create_task while the seats are taken.
        held = await s.acquire_async(timeout=5.0)
        other = await s.acquire_async(timeout=5.0)
        task = asyncio.create_task(s.acquire_async(timeout=30))
        while s.waiters == 0:
            await asyncio.sleep(0.001)
        held.release()
        third = await task
        assert third.is_held and s.used == 2
        third.release()
        other.release()

    run(main())
    assert s.used == 0
