"""The synchronous API: names, figures, permits, errors."""

import pickle
import threading
import time

import pytest

import shmsem
from conftest import wait_until


def test_acquire_release_and_figures(key):
    s = shmsem.Semaphore(key, permits=3)
    assert (s.key, s.capacity, s.used, s.available, s.waiters) == (key, 3, 0, 3, 0)
    p = s.acquire(n=2)
    assert isinstance(p, shmsem.Permit)
    assert p.weight == 2 and p.id != 0 and p.is_held and p.key == key
    assert (s.used, s.available) == (2, 1)
    assert p.acquired_at <= time.monotonic() + 0.01
    assert p.ttl is None and p.expires_at is None
    p.release()
    assert not p.is_held and s.used == 0
    p.release()  # a second release does nothing


def test_permit_is_a_context_manager(key):
    s = shmsem.Semaphore(key, permits=1)
    with s.acquire(timeout=5.0) as p:
        assert s.used == 1 and p.is_held
    assert s.used == 0 and not p.is_held


def test_same_key_same_seats(key):
    a = shmsem.Semaphore(key, permits=2)
    b = shmsem.Semaphore(key, permits=5)  # an existing semaphore keeps its capacity
    assert b.capacity == 2
    with a.acquire(n=2):
        assert b.used == 2 and b.try_acquire() is None


def test_try_acquire_returns_none_when_full(key):
    s = shmsem.Semaphore(key, permits=1)
    p = s.try_acquire(n=1)
    assert p is not None and p.is_held
    assert s.try_acquire() is None
    assert s.try_acquire(n=5) is None  # more than the capacity: None, not an error
    p.release()
    assert s.try_acquire() is not None


def test_timeout_is_an_acquisition_error_and_a_timeout_error(key):
    s = shmsem.Semaphore(key, permits=1)
    with s.acquire():
        t0 = time.monotonic()
        with pytest.raises(shmsem.AcquisitionError) as e:
            s.acquire(timeout=0.05)
        assert time.monotonic() - t0 >= 0.045
        assert e.value.reason == "timeout"
        assert isinstance(e.value, TimeoutError)
        assert key in str(e.value)
        with pytest.raises(TimeoutError):
            s.acquire(timeout=0)


def test_more_than_the_capacity_is_exceeds_capacity(key):
    s = shmsem.Semaphore(key, permits=2)
    with pytest.raises(shmsem.AcquisitionError) as e:
        s.acquire(n=3, timeout=1.0)
    assert e.value.reason == "exceeds_capacity"
    assert not isinstance(e.value, TimeoutError)


def test_bad_arguments_are_value_errors(key):
    s = shmsem.Semaphore(key, permits=1)
    for bad in (0, -1):
        with pytest.raises(ValueError):
            s.acquire(n=bad)
        with pytest.raises(ValueError):
            s.try_acquire(n=bad)
    with pytest.raises(ValueError):
        s.acquire(timeout=-1)
    with pytest.raises(ValueError):
        s.acquire(ttl=-0.5)
    for bad_key in ("", "a\0b", "k" * 300):
        with pytest.raises(ValueError):
            shmsem.Semaphore(bad_key, permits=1)
    with pytest.raises(ValueError):
        shmsem.Semaphore(key, permits=0)
    assert s.used == 0


def test_ttl_extend_and_lost_seats(key):
    s = shmsem.Semaphore(key, permits=1)
    p = s.acquire(ttl=60.0)
    assert p.ttl == 60.0 and p.expires_at > time.monotonic() + 50
    (h,) = s.holders()
    assert h.expires_at is not None
    p.extend(0.03)
    time.sleep(0.15)  # the lease lapses: that is the behaviour under test
    assert not p.is_held
    with pytest.raises(shmsem.ExtensionError):
        p.extend(10.0)
    with pytest.raises(shmsem.PermitNotHeldError) as e:
        p.release()
    assert key in str(e.value) and "TTL ran out" in str(e.value)
    assert s.used == 0


def test_default_ttl_of_the_handle(key):
    s = shmsem.Semaphore(key, permits=1, ttl=60.0)
    with s.acquire() as p:
        assert p.ttl == 60.0
    with s.acquire(ttl=0) as p:  # 0: no expiry, whatever the default
        assert p.ttl is None


def test_auto_renew_keeps_a_short_lease(key):
    s = shmsem.Semaphore(key, permits=1)
    p = s.acquire(ttl=0.3, auto_renew=True)
    assert p.auto_renewing
    time.sleep(0.7)  # past two TTLs: only renewal keeps it
    assert p.is_held
    p.release()


def test_force_release_all_displaces_live_permits(key):
    s = shmsem.Semaphore(key, permits=2)
    a, b = s.acquire(), s.acquire()
    assert s.force_release_all() == 2
    assert s.used == 0 and not a.is_held
    with pytest.raises(shmsem.PermitNotHeldError):
        a.release()
    b._release_quietly()
    assert s.stats().force_released == 2


def test_set_capacity(key):
    s = shmsem.Semaphore(key, permits=1)
    p = s.acquire()
    s.set_capacity(3)
    assert s.capacity == 3 and s.available == 2
    s.set_capacity(1)
    assert s.available == 0
    with pytest.raises(ValueError):
        s.set_capacity(0)
    p.release()


def test_wait_idle(key):
    s = shmsem.Semaphore(key, permits=1)
    assert s.wait_idle(0) is True
    p = s.acquire()
    assert s.wait_idle(0.02) is False
    threading.Timer(0.05, p.release).start()
    assert s.wait_idle(10.0) is True


def test_holders_and_stats(key):
    s = shmsem.Semaphore(key, permits=2)
    with s.acquire(n=2) as p:
        (h,) = s.holders()
        assert (h.pid, h.weight, h.permit_id, h.state) == (
            __import__("os").getpid(), 2, p.id, "alive")
        assert h.acquired_at <= time.monotonic() and h.expires_at is None
        assert not h.foreign_namespace
    assert s.try_acquire(n=3) is None
    st = s.stats()
    assert (st.acquired, st.released, st.try_failures) == (1, 1, 1)
    assert st.as_dict()["acquired"] == 1
    assert st.hold["count"] == 1 and len(st.hold["counts"]) == len(st.hold["bounds"]) + 1
    assert s.reap() == 0


def test_remove_and_list(make_key):
    k = make_key("listed")
    s = shmsem.Semaphore(k, permits=1)
    assert k in shmsem.Semaphore.list()
    assert shmsem.Semaphore.segment_path(k).startswith("/dev/shm/")
    assert shmsem.Semaphore.remove_if_unused(k) is False  # we have it open
    assert shmsem.Semaphore.remove(k) is True
    assert shmsem.Semaphore.remove(k) is False
    assert k not in shmsem.Semaphore.list()
    del s


def test_attach_needs_an_existing_semaphore(make_key):
    with pytest.raises(shmsem.SegmentError) as e:
        shmsem.Semaphore.attach(make_key("missing"))
    assert "missing" in str(e.value)
    assert e.value.category == "shmsem"


def test_shutdown_ends_waits(key):
    s = shmsem.Semaphore(key, permits=1)
    held = s.acquire()
    result = []

    def waiter():
        try:
            s.acquire(timeout=30)
        except shmsem.AcquisitionError as e:
            result.append(e.reason)

    t = threading.Thread(target=waiter)
    t.start()
    wait_until(lambda: s.waiters == 1, what="the waiter to queue")
    s.shutdown()
    t.join(10)
    assert result == ["shutdown"]
    assert held.is_held
    held.release()


def test_exceptions_pickle_with_their_fields():
    e = shmsem.AcquisitionTimeoutError("timed out", "timeout")
    f = pickle.loads(pickle.dumps(e))
    assert type(f) is shmsem.AcquisitionTimeoutError and f.reason == "timeout"
    assert str(f) == "timed out" and isinstance(f, TimeoutError)
    g = pickle.loads(pickle.dumps(shmsem.SegmentError("x", 13, "system")))
    assert (g.code, g.category) == (13, "system")
    assert issubclass(shmsem.AcquisitionError, Exception)
    for cls in (shmsem.PermitNotHeldError, shmsem.ExtensionError, shmsem.SegmentError):
        assert issubclass(cls, shmsem.Error)


def test_cancel_token_ends_a_blocking_acquire(key):
    s = shmsem.Semaphore(key, permits=1)
    held = s.acquire()
    reasons = []

    def wait(token):
        try:
            s.acquire(timeout=30, cancel=token)
        except shmsem.AcquisitionError as e:
            reasons.append(e.reason)

    def cancel_once_queued(token):
        wait_until(lambda: s.waiters == 1, what="the waiter to queue")
        token.cancel()

    # A waiter in another thread, then one in the main thread (which waits
    # through its helper thread while it runs the signal handlers).
    token = shmsem.CancelToken()
    t = threading.Thread(target=wait, args=(token,))
    t.start()
    cancel_once_queued(token)
    t.join(60)
    token = shmsem.CancelToken()
    t = threading.Thread(target=cancel_once_queued, args=(token,))
    t.start()
    wait(token)
    t.join(60)
    assert reasons == ["cancelled", "cancelled"]
    assert s.waiters == 0 and s.used == 1
    held.release()
    with pytest.raises(shmsem.AcquisitionError, match="cancelled"):
        s.acquire(cancel=token)  # already cancelled: fails at once, even when free
    assert s.used == 0


def test_trusted_owners_naming_no_user_is_a_value_error(make_key):
    k = make_key()
    for open_it in (lambda: shmsem.Semaphore(k, 1, trusted_owners=["root", "no-such-user"]),
                    lambda: shmsem.Semaphore.attach(k, trusted_owners=["no-such-user"])):
        with pytest.raises(ValueError, match="'no-such-user'.*no user"):
            open_it()
    assert k not in shmsem.Semaphore.list()
    assert shmsem.Semaphore(k, 1, trusted_owners=["root", 12345]).capacity == 1  # uids need no entry
