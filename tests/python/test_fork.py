"""Fork safety: a semaphore opened before os.fork() works in the child, as
with gunicorn --preload (the master opens it, then forks the workers)."""

import os
import signal
import tempfile
import time

import shmsem


def wait_child(pid, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"child {pid} did not finish")
        time.sleep(0.01)


def test_handle_opened_before_fork_works_in_the_child(key):
    s = shmsem.Semaphore(key, permits=1)
    with s.acquire():  # the parent uses it first: the child inherits used state
        pass
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only os._exit, never back into pytest
        code = 1
        try:
            os.close(r)
            p = s.acquire(timeout=10)
            os.write(w, b"H")
            code = 0 if s.used == 1 and p.is_held else 2
            p.release()
        finally:
            os._exit(code)
    os.close(w)
    assert os.read(r, 1) == b"H"
    os.close(r)
    assert wait_child(pid) == 0
    assert s.used == 0
    assert s.try_acquire() is not None


def test_permit_inherited_across_fork_stays_the_parents(key):
    s = shmsem.Semaphore(key, permits=1)
    p = s.acquire()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            try:
                p.release()
                code = 2
            except shmsem.PermitNotHeldError as e:
                code = 0 if "parent" in str(e) else 3
        finally:
            os._exit(code)
    assert wait_child(pid) == 0
    assert p.is_held and s.used == 1
    p.release()


def test_semaphore_release_in_a_child_leaves_the_parents_seat(key):
    s = shmsem.Semaphore(key, permits=2)
    s.acquire()  # kept by s, for the parent's s.release()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            try:
                s.release()
                code = 2
            except ValueError:
                with s:  # the child's own seat comes and goes
                    code = 0 if s.used == 2 else 3
        finally:
            os._exit(code)
    assert wait_child(pid) == 0
    assert s.used == 1
    s.release()
    assert s.used == 0


def test_preload_pattern_master_opens_workers_share_the_bound(key):
    """A master opens the semaphore and forks workers that contend for it; an
    O_APPEND witness log outside the library shows the bound held."""
    s = shmsem.Semaphore(key, permits=2)
    workers, rounds = 5, 30
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "witness")
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        pids = []
        for _ in range(workers):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    for _ in range(rounds):
                        with s.acquire(timeout=30):
                            os.write(fd, b"+\n")
                            time.sleep(0.001)
                            os.write(fd, b"-\n")
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        os.close(fd)
        assert [wait_child(p, 60) for p in pids] == [0] * workers
        inside = peak = 0
        with open(log) as f:
            for line in f:
                inside += 1 if line[0] == "+" else -1
                peak = max(peak, inside)
    assert peak == 2, peak  # the bound, and reached
    assert s.used == 0
    st = s.stats()
    assert st.acquired == workers * rounds == st.released
