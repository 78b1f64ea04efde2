"""shmsem.bounded: a seat per call, keys from the arguments, skip."""

import asyncio
import os

import pytest

import shmsem


def test_key_from_named_and_positional_arguments(make_key):
    prefix = make_key("b")
    seen = []

    @shmsem.bounded(prefix + ":{tenant}:{0}", permits=1)
    def export(tenant, kind="full"):
        held = [k for k in shmsem.Semaphore.list()
                if k.startswith(prefix + ":") and shmsem.Semaphore(k, permits=1).used == 1]
        seen.append(held)
        return kind

    assert export("acme") == "full"
    assert export(tenant="zeta", kind="delta") == "delta"  # {0} is the first parameter's value
    assert seen == [[prefix + ":acme:acme"], [prefix + ":zeta:zeta"]]
    for t in ("acme", "zeta"):
        assert shmsem.Semaphore(f"{prefix}:{t}:{t}", permits=1).used == 0
        shmsem.Semaphore.remove(f"{prefix}:{t}:{t}")


def test_skip_returns_none_without_running(key):
    ran = []

    @shmsem.bounded(key, permits=1, on_unavailable="skip", timeout=0)
    def job():
        ran.append(1)
        return "ran"

    s = shmsem.Semaphore(key, permits=1)
    with s.acquire():
        assert job() is None
    assert ran == []
    assert job() == "ran" and ran == [1]


def test_raise_by_default_and_mapping_callable(key):
    @shmsem.bounded(key, permits=1, timeout=0)
    def job():
        return 1

    class Busy(Exception):
        pass

    def mapped(k, reason):
        raise Busy(f"{k} {reason}")

    @shmsem.bounded(key, permits=1, timeout=0, on_unavailable=mapped)
    def job2():
        return 2

    s = shmsem.Semaphore(key, permits=1)
    with s.acquire():
        with pytest.raises(shmsem.AcquisitionError) as e:
            job()
        assert e.value.reason == "timeout"
        with pytest.raises(Busy, match="timeout"):
            job2()
    assert job() == 1 and job2() == 2


def test_seat_is_released_when_the_function_raises(key):
    @shmsem.bounded(key, permits=1)
    def boom():
        raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        boom()
    assert shmsem.Semaphore(key, permits=1).used == 0


def test_bad_templates_fail_at_decoration():
    def f(tenant):
        pass

    for bad in ("x:{nope}", "x:{1}", "x:{}", "x:{tenant"):
        with pytest.raises(ValueError):
            shmsem.bounded(bad)(f)
    with pytest.raises(ValueError):
        shmsem.bounded("x", permits=0)
    with pytest.raises(ValueError):
        shmsem.bounded("x", on_unavailable="ignore")


def test_coroutine_functions_are_bounded_too(key):
    s = shmsem.Semaphore(key, permits=1)

    @shmsem.bounded(key, permits=1)
    async def job():
        return s.used

    assert asyncio.run(job()) == 1
    assert s.used == 0


def test_fail_mode_for_an_unusable_segment(make_key, caplog):
    k = make_key("corrupt")
    with open(shmsem.Semaphore.segment_path(k), "wb") as f:
        f.write(b"not a segment" * 100)
    ran = []

    @shmsem.bounded(k, permits=1)
    def open_mode():
        ran.append(1)
        return "unbounded"

    @shmsem.bounded(k, permits=1, fail_mode="closed", on_unavailable="skip")
    def closed_mode():
        ran.append(2)

    try:
        assert open_mode() == "unbounded"
        assert any("without a bound" in r.getMessage() for r in caplog.records)
        assert closed_mode() is None
        assert ran == [1]
    finally:
        os.unlink(shmsem.Semaphore.segment_path(k))


def test_skip_and_a_mapping_callable_do_not_wait_without_a_timeout(key):
    """Only "raise" waits for a seat when no timeout is given."""
    import threading

    ran, mapped = [], []

    @shmsem.bounded(key, permits=1, on_unavailable="skip")
    def skipper():
        ran.append("skip")

    def mapping(k, reason):
        mapped.append(reason)
        raise LookupError(k)

    @shmsem.bounded(key, permits=1, on_unavailable=mapping)
    def mapper():
        ran.append("map")

    outcome = []

    def calls():
        outcome.append(skipper())
        try:
            mapper()
        except LookupError as e:
            outcome.append(str(e))

    s = shmsem.Semaphore(key, permits=1)
    held = s.acquire()
    t = threading.Thread(target=calls)
    t.start()
    t.join(30)
    waited = t.is_alive()
    held.release()  # lets a call that waits finish, so that the failure does not hang
    t.join()
    assert not waited, "a call under on_unavailable='skip' or a callable waited for a seat"
    assert outcome == [None, key] and mapped == ["timeout"] and ran == []
