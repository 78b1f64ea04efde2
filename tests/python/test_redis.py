"""The package on a Redis URL, against a private redis-server (Debian's)
that this module starts on a unix socket in a temporary folder."""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import shmsem
from conftest import python_env


def _accepts(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@pytest.fixture(scope="module")
def redis_socket():
    if not shutil.which("redis-server"):
        pytest.fail("redis-server is not installed (scripts/deps.sh installs it)")
    folder = tempfile.mkdtemp(prefix="shmsem-py-redis.")
    path = os.path.join(folder, "redis.sock")
    server = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", path, "--unixsocketperm", "700",
         "--dir", folder, "--save", "", "--appendonly", "no",
         "--logfile", os.path.join(folder, "redis.log")],
        preexec_fn=_die_with_parent)
    try:
        # No event says "listening": poll the socket, with a generous bound.
        deadline = time.monotonic() + 20
        while not _accepts(path):
            assert server.poll() is None, "redis-server exited; see " + folder
            assert time.monotonic() < deadline, "redis-server did not start; see " + folder
            time.sleep(0.005)
        yield path
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def url(request, redis_socket):
    made = []

    def make(suffix=""):
        name = "pytest.%d.%s%s" % (os.getpid(), request.node.name, "." + suffix if suffix else "")
        u = "redis+unix://%s?key=%s" % (redis_socket, name)
        made.append(u)
        return u

    yield make
    for u in made:
        try:
            shmsem.Semaphore.remove(u)
        except shmsem.Error:
            pass


def test_a_redis_url_opens_acquires_and_releases(url, redis_socket, monkeypatch):
    monkeypatch.setenv("SHMSEM_HOST", "py-host-a")
    u = url()
    sem = shmsem.Semaphore(u, 2, session_timeout=1.0)
    assert sem.key == u
    assert sem.capacity == 2
    with sem.acquire(timeout=10) as first:
        assert first.fencing_token > 0
        assert sem.used == 1
        second = sem.try_acquire()
        assert second is not None
        assert second.fencing_token > first.fencing_token
        assert sem.try_acquire() is None
        holders = sem.holders()
        assert sorted(h.permit_id for h in holders) == sorted([first.id, second.id])
        assert {h.host for h in holders} == {"py-host-a"}
        assert {h.pid for h in holders} == {os.getpid()}
        assert first.is_held
        second.release()
    assert sem.used == 0
    third = sem.acquire(timeout=0)
    assert third.fencing_token > second.fencing_token
    third.release()
    assert u in shmsem.Semaphore.list("redis+unix://" + redis_socket)
    with pytest.raises(ValueError):
        shmsem.Semaphore.segment_path(u)


def test_a_killed_holder_on_another_host_gives_its_seat_back(url):
    u = url()
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, shmsem
            sem = shmsem.Semaphore(sys.argv[1], 1, session_timeout=1.0)
            p = sem.acquire(timeout=30)
            print("held", flush=True)
            sys.stdin.read()
        """), u],
        env=dict(python_env(), SHMSEM_HOST="py-host-b"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        sem = shmsem.Semaphore(u, 1, session_timeout=1.0)
        (holder,) = sem.holders()
        assert holder.host == "py-host-b"
        assert holder.pid == child.pid
        assert sem.try_acquire() is None
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    start = time.monotonic()
    # The child's session is 1 s; the bound is for a loaded machine.
    with sem.acquire(timeout=30) as p:
        print("seat back after %.0f ms" % ((time.monotonic() - start) * 1e3))
        assert p.fencing_token > 0


def test_bad_and_unreachable_urls_fail_clearly(redis_socket):
    with pytest.raises(ValueError, match="redis://"):
        shmsem.Semaphore("redis://", 1)
    folder = os.path.dirname(redis_socket)
    start = time.monotonic()
    with pytest.raises(shmsem.SegmentError, match="absent.sock"):
        shmsem.Semaphore("redis+unix://%s/absent.sock?key=x" % folder, 1, connect_timeout=0.2)
    assert time.monotonic() - start < 20


def test_fairness_is_chosen_at_creation(make_key):
    key = make_key("barging")
    sem = shmsem.Semaphore(key, 2, fairness="barging")
    assert sem.fairness == "barging"
    assert shmsem.Semaphore(key, 2, fairness="fifo").fairness == "barging"
    assert shmsem.Semaphore(make_key("plain"), 1).fairness == "barging"
    assert shmsem.Semaphore(make_key("ordered"), 1, fairness="fifo").fairness == "fifo"
    with pytest.raises(ValueError, match="fairness"):
        shmsem.Semaphore(make_key("bad"), 1, fairness="fast")


def test_fencing_tokens_on_shared_memory_are_opt_in(make_key):
    plain = shmsem.Semaphore(make_key("plain"), 1)
    with plain.acquire() as p:
        assert p.fencing_token == 0
    fenced = shmsem.Semaphore(make_key("fenced"), 1, fencing=True)
    tokens = []
    for _ in range(3):
        with fenced.acquire() as p:
            tokens.append(p.fencing_token)
    assert tokens[0] > 0 and tokens == sorted(set(tokens))
