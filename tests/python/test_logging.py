"""Library log lines reach logging.getLogger("shmsem"), not bare stderr; a
Permit collected while held leaves its seat to its Semaphore, and a lease
that nothing can release any more logs if it was lost."""

import gc
import logging
import threading
import time

import pytest

import shmsem
from conftest import wait_until


def shmsem_records(caplog):
    return [r for r in caplog.records if r.name == "shmsem"]


def test_library_warning_goes_to_python_logging(key, caplog, capfd):
    s = shmsem.Semaphore(key, permits=1)
    p = s.acquire()
    with caplog.at_level(logging.WARNING, logger="shmsem"):
        assert s.force_release_all() == 1
    (rec,) = shmsem_records(caplog)
    assert rec.levelno == logging.WARNING
    assert key in rec.getMessage() and "displaced" in rec.getMessage()
    assert "displaced" not in capfd.readouterr().err
    p._release_quietly()


def test_lines_from_a_library_thread_are_delivered(key, caplog):
    """The renewal thread has no GIL: its line is queued and delivered to
    Python's logging in the main thread."""
    s = shmsem.Semaphore(key, permits=1)

    def renewal_lines():
        return [r for r in shmsem_records(caplog) if "auto-renewal" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="shmsem"):
        p = s.acquire(ttl=0.3, auto_renew=True)
        s.force_release_all()
        # Pending calls run between the main thread's bytecodes, as it polls.
        wait_until(renewal_lines, what="the renewal thread's line")
    (rec,) = renewal_lines()
    assert str(p.id) in rec.getMessage() and key in rec.getMessage()
    assert rec.threadName == threading.main_thread().name
    p._release_quietly()


def test_collected_permit_leaves_its_seat_to_its_semaphore(key):
    s = shmsem.Semaphore(key, permits=1)
    p = s.acquire()
    assert s.used == 1
    del p
    gc.collect()
    assert s.used == 1
    s.release()
    assert s.used == 0


def test_collected_lease_that_lost_its_seat_logs_a_warning(key, caplog):
    watcher = shmsem.Semaphore(key, permits=1)
    s = shmsem.Semaphore(key, permits=1)
    p = s.acquire(ttl=0.03)
    pid = p.id
    time.sleep(0.12)  # the lease lapses: that is the behaviour under test
    with caplog.at_level(logging.WARNING, logger="shmsem"), pytest.warns(ResourceWarning):
        del p, s
        gc.collect()
    msgs = [r.getMessage() for r in shmsem_records(caplog)]
    assert any(str(pid) in m and key in m and "TTL ran out" in m for m in msgs), msgs
    assert watcher.used == 0


def test_context_manager_exit_logs_a_lost_seat_instead_of_raising(key, caplog):
    s = shmsem.Semaphore(key, permits=1)
    with caplog.at_level(logging.WARNING, logger="shmsem"):
        with s.acquire():
            s.force_release_all()
    msgs = [r.getMessage() for r in shmsem_records(caplog)]
    assert any("work had already run" in m for m in msgs), msgs
