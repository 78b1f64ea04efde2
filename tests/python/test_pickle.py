"""A Semaphore pickles by key and options: a multiprocessing child under
spawn or forkserver, and Pool.apply, reopen it. Seats never travel."""

import multiprocessing as mp
import pickle

import pytest

import shmsem


def hold_and_report(sem, conn):
    p = sem.acquire(timeout=30)
    conn.send((sem.key, sem.capacity, sem.fairness, p.ttl, sem.used))
    conn.recv()  # the parent has looked
    p.release()


def take_one_seat(sem):
    with sem:
        return sem.key, sem.used


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_process_argument_reopens_the_semaphore(key, method):
    ctx = mp.get_context(method)
    s = shmsem.Semaphore(key, permits=3, ttl=20.0, fairness="barging")
    s.acquire()  # the parent's seat stays the parent's
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=hold_and_report, args=(s, child))
    proc.start()
    try:
        assert parent.poll(60), "the child did not report"
        assert parent.recv() == (key, 3, "barging", 20.0, 2)
        assert s.used == 2
        parent.send("done")
        proc.join(60)
    finally:
        proc.kill()
        proc.join()
    assert proc.exitcode == 0
    assert s.used == 1
    s.release()


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_pool_apply_takes_a_semaphore(key, method):
    s = shmsem.Semaphore(key, permits=2)
    with mp.get_context(method).Pool(1) as pool:
        assert pool.apply(take_one_seat, (s,)) == (key, 1)
    assert s.used == 0


def test_round_trip_keeps_the_options_and_attach_stays_attach(make_key):
    k = make_key()
    s = shmsem.Semaphore(k, permits=2, ttl=7.0, trusted_owners=["root"])
    copy = pickle.loads(pickle.dumps(s))
    assert copy.key == k and copy.capacity == 2
    with copy.acquire() as p:
        assert p.ttl == 7.0
    attached = pickle.dumps(shmsem.Semaphore.attach(k))
    shmsem.Semaphore.remove(k)
    with pytest.raises(shmsem.SegmentError, match=k):
        pickle.loads(attached)  # attach() does not create it again


def test_a_permit_cannot_be_pickled_and_says_why(key):
    s = shmsem.Semaphore(key, permits=1)
    with s.acquire() as p:
        with pytest.raises(TypeError, match="Permit cannot be pickled"):
            pickle.dumps(p)
