"""Segments of other users: /dev/shm is writable by everyone, so another user
can create a key's file before its service does. Root refuses such a
segment with UntrustedOwnerError unless it names the owner in
trusted_owners. The squatter is a real process running as nobody."""

import os
import pickle

import pytest

import shmsem

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create as another user")


def create_as_nobody(key, permits):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            shmsem.Semaphore(key, permits, mode=0o666)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.stat(shmsem.Semaphore.segment_path(key)).st_uid == NOBODY


def test_root_refuses_a_segment_nobody_created_with_a_typed_error(key):
    create_as_nobody(key, 100)
    path = shmsem.Semaphore.segment_path(key)
    with open(path, "rb") as f:
        before = f.read()
    for open_it in (lambda: shmsem.Semaphore(key, 2), lambda: shmsem.Semaphore.attach(key)):
        with pytest.raises(shmsem.UntrustedOwnerError) as info:
            open_it()
        e = info.value
        assert isinstance(e, shmsem.SegmentError) and isinstance(e, PermissionError)
        assert e.category == "shmsem"
        for part in (key, path, "uid 65534", "mode 0666", "trusted_owners"):
            assert part in str(e), part
    with open(path, "rb") as f:
        assert f.read() == before, "the refused segment was written to"


def test_root_accepts_it_when_it_trusts_the_owner_on_purpose(key):
    create_as_nobody(key, 100)
    s = shmsem.Semaphore(key, 2, trusted_owners=["root", "nobody"])
    assert s.capacity == 100  # the existing capacity stands
    with s.acquire(timeout=5.0):
        assert s.used == 1
    assert shmsem.Semaphore.attach(key, trusted_owners=[NOBODY]).capacity == 100


def test_trusted_owners_takes_a_list_not_a_bare_name(key):
    with pytest.raises(TypeError):
        shmsem.Semaphore(key, 1, trusted_owners="nobody")
    with pytest.raises(TypeError):
        shmsem.Semaphore.attach(key, trusted_owners=[1.5])
    with pytest.raises(ValueError):
        shmsem.Semaphore(key, 1, trusted_owners=[""])
    with pytest.raises(ValueError):
        shmsem.Semaphore(key, 1, trusted_owners=[-1])


def test_untrusted_owner_error_pickles_with_its_fields():
    e = shmsem.UntrustedOwnerError("owned by nobody", 16, "shmsem")
    f = pickle.loads(pickle.dumps(e))
    assert type(f) is shmsem.UntrustedOwnerError
    assert (str(f), f.code, f.category) == ("owned by nobody", 16, "shmsem")


def test_a_squatted_key_does_not_switch_off_a_fail_open_bound(key):
    create_as_nobody(key, 100)
    ran = []

    @shmsem.bounded(key, permits=1)
    def work():
        ran.append(1)

    with pytest.raises(shmsem.AcquisitionError) as info:
        work()
    assert info.value.reason == "error"
    assert isinstance(info.value.__cause__, shmsem.UntrustedOwnerError)
    assert ran == []
