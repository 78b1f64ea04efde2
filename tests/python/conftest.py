"""Fixtures of the shmsem pytest suite.

The suite runs against the build tree: ctest sets PYTHONPATH to
<build>/python and SHMSEM_LIBRARY to <build>/src/libshmsem.so.0, and runs
Debian's /usr/bin/python3. Each test gets keys of its own, removed after it.
"""

import os
import re
import sys
import time

import pytest

import shmsem

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def make_key(request):
    """make_key(suffix="") -> a key unique to this test and process."""
    made = []
    base = "pytest.%d.%s" % (os.getpid(), re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name))

    def make(suffix=""):
        k = base + ("." + suffix if suffix else "")
        made.append(k)
        return k

    yield make
    for k in made:
        try:
            shmsem.Semaphore.remove(k)
        except shmsem.Error:
            pass


@pytest.fixture
def key(make_key):
    return make_key()


def wait_until(predicate, timeout=10.0, what="condition"):
    """Polls a lock-free figure (waiters, used) until it holds: there is no
    event for "a process is now queued". The bound is generous."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.002)


def python_env():
    """The environment for a child interpreter that imports this build's shmsem."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env
