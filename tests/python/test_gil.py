"""A blocking acquire releases the GIL: other Python threads keep running."""

import threading
import time

import shmsem
from conftest import wait_until


def test_blocked_acquire_in_a_thread_lets_the_main_thread_run(key):
    s = shmsem.Semaphore(key, permits=1)
    held = s.acquire()
    outcome = []

    def blocked():
        try:
            s.acquire(timeout=30).release()
            outcome.append("acquired")
        except shmsem.AcquisitionError as e:
            outcome.append(e.reason)

    t = threading.Thread(target=blocked)
    t.start()
    wait_until(lambda: s.waiters == 1, what="the thread to queue")
    # Pure Python work while the other thread is blocked: it finishes only if
    # that thread does not hold the GIL.
    t0 = time.monotonic()
    total = sum(i * i for i in range(300_000))
    busy = time.monotonic() - t0
    assert total > 0 and t.is_alive() and s.waiters == 1
    held.release()
    t.join(10)
    assert outcome == ["acquired"]
    print(f"300k-step Python loop took {busy * 1e3:.0f} ms while another thread was blocked in acquire")


def test_blocked_acquire_in_the_main_thread_lets_a_thread_release(key):
    s = shmsem.Semaphore(key, permits=1)
    ready = threading.Event()
    steps = []

    def holder():
        p = s.acquire()
        ready.set()
        # Runs Python (needs the GIL) while the main thread waits.
        wait_until(lambda: s.waiters == 1, what="the main thread to queue")
        for i in range(1000):
            steps.append(i)
        p.release()

    t = threading.Thread(target=holder)
    t.start()
    ready.wait(10)
    p = s.acquire(timeout=30)  # would fail with a timeout if it kept the GIL
    assert len(steps) == 1000
    p.release()
    t.join(10)
