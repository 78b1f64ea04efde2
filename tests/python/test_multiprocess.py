"""Across processes with multiprocessing: the same seats everywhere, and the
seat of a SIGKILLed holder comes back."""

import multiprocessing as mp
import time

import shmsem
from conftest import wait_until


def hold_until_killed(key, ready):
    s = shmsem.Semaphore(key, permits=1)
    permit = s.acquire()
    ready.set()
    while permit.is_held:
        time.sleep(60)


def contend(key, rounds, counter, peak, lock):
    s = shmsem.Semaphore(key, permits=2)
    for _ in range(rounds):
        with s.acquire(timeout=30):
            with lock:
                counter.value += 1
                peak.value = max(peak.value, counter.value)
            time.sleep(0.001)
            with lock:
                counter.value -= 1


def test_seat_of_a_sigkilled_holder_comes_back(key):
    ctx = mp.get_context("spawn")  # fresh interpreters: nothing inherited
    s = shmsem.Semaphore(key, permits=1)
    ready = ctx.Event()
    holder = ctx.Process(target=hold_until_killed, args=(key, ready))
    holder.start()
    try:
        assert ready.wait(60)
        (h,) = s.holders()
        assert h.pid == holder.pid and h.state == "alive"
        assert s.try_acquire() is None
        t0 = time.monotonic()
        holder.kill()  # SIGKILL, not yet reaped by join(): a zombie is dead too
        p = s.acquire(timeout=10)
        took = time.monotonic() - t0
    finally:
        holder.kill()
        holder.join(30)
    print(f"the seat of a SIGKILLed holder came back in {took * 1e3:.1f} ms")
    assert holder.exitcode == -9
    st = s.stats()
    assert st.reaped == 1 and st.reclaimed_seats == 1
    p.release()
    assert s.used == 0


def test_processes_share_the_bound(key):
    ctx = mp.get_context("spawn")
    shmsem.Semaphore(key, permits=2)
    counter, peak, lock = ctx.Value("i", 0, lock=False), ctx.Value("i", 0, lock=False), ctx.Lock()
    procs = [ctx.Process(target=contend, args=(key, 25, counter, peak, lock)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 4
    assert peak.value <= 2
    wait_until(lambda: shmsem.Semaphore(key, permits=2).used == 0)
