"""Seats taken by acquire() stay held until released, as with
threading.Semaphore: through the Permit, Semaphore.release() or `with sem:`.
A lease that nothing can release any more goes back with a ResourceWarning."""

import gc
import os
import subprocess
import sys
import textwrap

import pytest

import shmsem
from conftest import python_env


def test_threading_idiom_holds_the_seat_inside_the_if(key):
    s = shmsem.Semaphore(key, permits=1)
    if s.acquire(timeout=5):
        gc.collect()
        assert s.used == 1
        assert s.try_acquire() is None
        s.release()
    assert s.used == 0


def test_bare_acquire_holds_until_semaphore_release(key):
    s = shmsem.Semaphore(key, permits=2)
    s.acquire()
    s.acquire()
    gc.collect()
    assert s.used == 2
    s.release()
    assert s.used == 1
    s.release()
    assert s.used == 0
    with pytest.raises(ValueError, match=key):
        s.release()  # nothing left: as threading.BoundedSemaphore


def test_with_semaphore_takes_and_returns_one_seat(key):
    s = shmsem.Semaphore(key, permits=2)
    with s as permit:
        assert s.used == 1 and permit.is_held
        with s:
            assert s.used == 2
        assert s.used == 1 and permit.is_held  # the inner block gave back its own
    assert s.used == 0


def test_permit_and_semaphore_release_give_back_the_same_lease(key):
    s = shmsem.Semaphore(key, permits=1)
    p = s.acquire()
    p.release()
    with pytest.raises(ValueError):
        s.release()  # the permit's release() took it out of the object's keeping
    p = s.acquire()
    s.release()
    assert not p.is_held and s.used == 0
    p.release()  # already released: nothing to do


def test_release_of_a_lost_seat_raises(key):
    s = shmsem.Semaphore(key, permits=1)
    s.acquire()
    assert s.force_release_all() == 1
    with pytest.raises(shmsem.PermitNotHeldError):
        s.release()
    with pytest.raises(ValueError):
        s.release()  # given up either way


def test_seats_of_a_collected_semaphore_and_permit_go_back_with_a_resource_warning(key):
    watcher = shmsem.Semaphore(key, permits=1)
    s = shmsem.Semaphore(key, permits=1)
    s.acquire()
    gc.collect()
    assert watcher.used == 1
    with pytest.warns(ResourceWarning, match=key):
        del s
        gc.collect()
    assert watcher.used == 0


def test_a_permit_outlives_its_semaphore_object(key):
    watcher = shmsem.Semaphore(key, permits=1)
    p = shmsem.Semaphore(key, permits=1).acquire()
    gc.collect()
    assert watcher.used == 1 and p.is_held
    p.release()
    assert watcher.used == 0


def run_child(code, *flags):
    return subprocess.run([sys.executable, *flags, "-c", textwrap.dedent(code)],
                          env=python_env(), capture_output=True, text=True, timeout=60)


def test_unreleasable_seat_warns_under_error_resource_warning(key):
    r = run_child(f"""
        import gc, shmsem
        shmsem.Semaphore({key!r}, permits=1).acquire()
        gc.collect()
        print("used", shmsem.Semaphore({key!r}, permits=1).used)
        """, "-X", "dev", "-W", "error::ResourceWarning")
    assert r.returncode == 0, r.stderr
    assert "used 0" in r.stdout
    assert "ResourceWarning" in r.stderr and key in r.stderr, r.stderr


def test_threading_idiom_warns_nothing_and_holds_across_processes(key):
    """A child writes `if s.acquire(timeout=5):` and only then reports; the
    parent sees the seat taken until the child releases it."""
    s = shmsem.Semaphore(key, permits=1)
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", textwrap.dedent(f"""
            import gc, os, shmsem
            s = shmsem.Semaphore({key!r}, permits=1)
            if s.acquire(timeout=5):
                gc.collect()
                os.write({to_parent_w}, b"in")
                os.read({to_child_r}, 1)
                s.release()
            os.write({to_parent_w}, b"out")
            """)],
        env=python_env(), pass_fds=(to_child_r, to_parent_w), stderr=subprocess.PIPE, text=True)
    os.close(to_child_r)
    os.close(to_parent_w)
    try:
        assert os.read(to_parent_r, 2) == b"in"
        assert s.used == 1
        assert s.try_acquire() is None
        os.write(to_child_w, b"g")
        assert os.read(to_parent_r, 3) == b"out"
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 0, err
    assert "ResourceWarning" not in err, err
    assert s.used == 0
