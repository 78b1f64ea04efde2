"""A real gunicorn fleet under load, with workers SIGKILLed while they hold
a seat.

Debian's gunicorn runs examples/gunicorn/app.py with --preload and 6 sync
workers; the app lets at most 2 requests at a time into an 8 ms "backend
call" with a shmsem.Semaphore. 12 client threads load it for 12 s over a
unix socket while this test SIGKILLs a worker that holds a seat every
1.2 s. The app appends begin/enter/exit records to an O_APPEND witness log,
outside the library; from it the test checks the bound, and which requests
were lost on killed workers. One line of figures is printed.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

import shmsem
from conftest import HERE, python_env

APP_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "gunicorn"))
GUNICORN = shutil.which("gunicorn", path="/usr/bin")
WORKERS, CONNECTIONS, SLOTS, SECTION = 6, 12, 2, 0.008
LOAD_SECONDS, KILL_EVERY, MIN_KILLS = 12.0, 1.2, 5


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def get(sock, request_id):
    """The response's status, or the name of the error that ended it."""
    c = UnixHTTPConnection(sock, 30)
    try:
        c.request("GET", "/backend?id=" + request_id)
        r = c.getresponse()
        r.read()
        return r.status
    except (OSError, http.client.HTTPException) as e:
        return type(e).__name__
    finally:
        c.close()


def children(pid):
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry))
    return out


def read_witness(path):
    records = []
    with open(path) as f:
        for line in f:
            t, pid, event, rid = line.split()
            records.append((int(t), int(pid), event, rid))
    return sorted(records)


@pytest.mark.skipif(GUNICORN is None, reason="Debian's gunicorn is not installed")
def test_gunicorn_fleet_keeps_the_bound_while_workers_are_killed(key):
    s = shmsem.Semaphore(key, permits=SLOTS)
    tmp = tempfile.mkdtemp(prefix="shmsem-gunicorn-")
    sock, witness, log = (os.path.join(tmp, n) for n in ("g.sock", "witness.log", "gunicorn.log"))
    env = python_env()
    env.update(BACKEND_KEY=key, BACKEND_SLOTS=str(SLOTS), BACKEND_SECONDS=str(SECTION),
               WITNESS_LOG=witness)
    with open(log, "w") as logf:
        master = subprocess.Popen(
            [GUNICORN, "--preload", "--workers", str(WORKERS), "--worker-class", "sync",
             "--bind", "unix:" + sock, "--chdir", APP_DIR, "--timeout", "60",
             "--graceful-timeout", "10", "--log-level", "warning", "app:app"],
            env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (os.path.exists(sock) and get(sock, "ready") == 200
                   and len(children(master.pid)) == WORKERS):
            assert master.poll() is None, open(log).read()
            assert time.monotonic() < deadline, "gunicorn did not start: " + open(log).read()
            time.sleep(0.05)

        results, stop_at = [], time.monotonic() + LOAD_SECONDS

        def client(n):
            i = 0
            while time.monotonic() < stop_at:
                rid = f"c{n}-{i}"
                results.append((rid, get(sock, rid)))
                i += 1

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CONNECTIONS)]
        started = time.monotonic()
        for t in threads:
            t.start()
        kills, tick = [], threading.Event()
        last_event, witness_pos = {}, 0

        def inside_now():
            """Workers whose latest witness record is "enter"."""
            nonlocal witness_pos
            with open(witness) as f:
                f.seek(witness_pos)
                chunk = f.read()
            complete = chunk[:chunk.rfind("\n") + 1]
            witness_pos += len(complete)
            for line in complete.splitlines():
                _, pid, event, _ = line.split()
                last_event[int(pid)] = event
            return {pid for pid, event in last_event.items() if event == "enter"}

        next_kill = started + 1.0
        while next_kill < stop_at - 0.5:
            tick.wait(max(0.0, next_kill - time.monotonic()))
            next_kill += KILL_EVERY
            workers = children(master.pid)
            # A holder that the witness shows inside the section; a few
            # looks if none is at this instant.
            for _ in range(50):
                inside = inside_now()
                victims = [h.pid for h in s.holders()
                           if h.state == "alive" and h.pid in workers and h.pid in inside]
                if victims:
                    break
                tick.wait(0.002)
            if victims:
                # The time just before the kill: from the kill on, the worker
                # runs no more code, and its seat can go to another only once
                # its files are closed at its death (its liveness token is a
                # lock on one of them). The time after kill() returns can be
                # late by a whole time slice: the woken victim preempts us.
                kills.append((victims[0], time.monotonic_ns()))
                os.kill(victims[0], signal.SIGKILL)
        for t in threads:
            t.join(60)
        elapsed = time.monotonic() - started
    finally:
        master.send_signal(signal.SIGTERM)
        try:
            master.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(master.pid, signal.SIGKILL)
            master.wait(10)

    # --- the witness: concurrency, and what the killed workers were doing
    records = read_witness(witness)
    killed_at = dict(kills)
    events, open_enter, last_by_pid = [], {}, {}
    for t, pid, event, rid in records:
        last_by_pid[pid] = event
        if event == "enter":
            open_enter[pid] = (t, rid)
            events.append((t, 1))
        elif event == "exit":
            open_enter.pop(pid, None)
            events.append((t, -1))
    # A worker killed inside the section left it when it was killed.
    for pid, (t, rid) in open_enter.items():
        assert pid in killed_at, f"worker {pid} entered the section for {rid} and never left"
        events.append((killed_at[pid], -1))
    inside = peak = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):  # exits first at a tie
        inside += d
        peak = max(peak, inside)
    killed_holding = [pid for pid in killed_at if pid in open_enter]

    # --- the requests: every one not on a killed worker got 200
    rids_of = {}
    for _, pid, _, rid in records:
        rids_of.setdefault(rid, set()).add(pid)
    failed = [(rid, st) for rid, st in results if st != 200]
    for rid, status in failed:
        pids = rids_of.get(rid, set())
        # No record at all: the connection was accepted by a worker that died
        # before it reached the app.
        assert not isinstance(status, int), f"request {rid} got HTTP {status}"
        assert pids <= set(killed_at), f"request {rid} failed ({status}) on live worker(s) {pids}"
    ok = len(results) - len(failed)

    # --- after the load: no seat in use, and the reaped seats counted
    assert s.wait_idle(10.0)  # reaps the last killed worker's seat if nobody did yet
    assert s.used == 0
    cli = os.environ.get("SHMSEM_CLI")
    if cli:
        info = json.loads(subprocess.run([cli, "info", key, "--json"], check=True,
                                         capture_output=True, text=True).stdout)
        reaped = info["stats"]["reaped"]
    else:
        reaped = s.stats().reaped
    ideal = SLOTS / SECTION
    rate = ok / elapsed
    print(f"\ngunicorn fleet: {len(results)} requests in {elapsed:.1f} s, {ok} x 200, "
          f"{len(failed)} lost on killed workers; {len(kills)} kills, {len(killed_holding)} "
          f"inside the section; max concurrency {peak} (bound {SLOTS}); reaped {reaped}; "
          f"{rate:.0f} req/s = {100 * rate / ideal:.0f}% of the ideal {ideal:.0f} req/s")
    assert peak <= SLOTS, f"witness log kept in {tmp}"
    assert peak == SLOTS  # the load did reach the bound: the check above was not idle
    assert len(killed_holding) >= MIN_KILLS, (kills, killed_holding)
    assert len(failed) <= len(kills)
    assert len(killed_holding) <= reaped <= len(kills)
    assert rate >= 0.4 * ideal
    shutil.rmtree(tmp)
