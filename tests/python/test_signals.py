"""Ctrl-C (SIGINT) interrupts a blocking acquire in the main thread.

A child interpreter blocks in acquire(); this test sends it SIGINT and reads
when KeyboardInterrupt arrived (CLOCK_MONOTONIC is shared by processes). The
figure is printed; the assertion is a generous bound.
"""

import signal
import subprocess
import sys
import time

import shmsem
from conftest import python_env, wait_until

CHILD = r"""
import sys, time, shmsem
s = shmsem.Semaphore(sys.argv[1], permits=1)
print("waiting", flush=True)
try:
    s.acquire(timeout=60)
    print("acquired", flush=True)
except KeyboardInterrupt:
    t = time.monotonic()
    print("interrupted %.9f used=%d waiters=%d" % (t, s.used, s.waiters), flush=True)
"""


def test_sigint_interrupts_a_blocked_acquire_and_takes_no_seat(key):
    s = shmsem.Semaphore(key, permits=1)
    held = s.acquire()
    child = subprocess.Popen([sys.executable, "-c", CHILD, key], stdout=subprocess.PIPE,
                             text=True, env=python_env())
    try:
        assert child.stdout.readline().strip() == "waiting"
        wait_until(lambda: s.waiters == 1, what="the child to queue")
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline().split()
        assert child.wait(10) == 0
    finally:
        if child.poll() is None:
            child.kill()
    assert line[0] == "interrupted", line
    latency_ms = (float(line[1]) - sent) * 1e3
    print(f"Ctrl-C interrupted a blocked acquire in {latency_ms:.1f} ms")
    assert latency_ms < 1000
    assert line[2:] == ["used=1", "waiters=0"]  # only our seat; the request is gone
    assert s.used == 1 and s.waiters == 0
    assert s.stats().cancelled == 1
    held.release()


def test_a_handler_that_does_not_raise_leaves_the_wait_alone(key):
    s = shmsem.Semaphore(key, permits=1)
    held = s.acquire()
    code = r"""
import os, signal, sys, threading, shmsem
s = shmsem.Semaphore(sys.argv[1], permits=1)
hits = []
def on_usr1(*args):
    hits.append(1)
    print("handled", flush=True)
signal.signal(signal.SIGUSR1, on_usr1)
print("waiting", flush=True)
p = s.acquire(timeout=60)
print("acquired hits=%d" % len(hits), flush=True)
p.release()
"""
    child = subprocess.Popen([sys.executable, "-c", code, key], stdout=subprocess.PIPE,
                             text=True, env=python_env())
    try:
        assert child.stdout.readline().strip() == "waiting"
        wait_until(lambda: s.waiters == 1, what="the child to queue")
        child.send_signal(signal.SIGUSR1)
        # The handler's own line says it has run; the request must still be queued.
        assert child.stdout.readline().strip() == "handled"
        assert s.waiters == 1
        held.release()
        assert child.stdout.readline().strip() == "acquired hits=1"
        assert child.wait(10) == 0
    finally:
        if child.poll() is None:
            child.kill()
    assert s.used == 0
    assert s.stats().cancelled == 0  # the handler never withdrew the request
