"""Limit a backend call across gunicorn workers.

Every worker of a prefork server is its own process, so a threading or
asyncio semaphore bounds one worker only. A shmsem.Semaphore is one bound
for every process on the host: here at most BACKEND_SLOTS (2) workers are
inside the backend call at once, however many workers gunicorn runs, and a
worker killed in the middle of the call (OOM killer, SIGKILL, a timeout)
gives its seat back to the others within milliseconds.

    gunicorn --preload --workers 6 app:app

With --preload the master imports this module, so the semaphore is opened
once and every worker inherits it across fork(); without it each worker
opens it itself. Both work.

Settings (environment): BACKEND_KEY (the semaphore's key), BACKEND_SLOTS,
BACKEND_SECONDS (the simulated call's length), BACKEND_TIMEOUT (how long a
request waits for a seat before it gets 503), WITNESS_LOG (optional: a file
that gets "begin", "enter", "exit" records with CLOCK_MONOTONIC
timestamps, appended with O_APPEND, so that a test can check the bound from
outside the library).
"""

import os
import time
from typing import Any, Callable, Dict, Iterable, List, Tuple
from urllib.parse import parse_qs

import shmsem

BACKEND = shmsem.Semaphore(os.environ.get("BACKEND_KEY", "example.backend"),
                           permits=int(os.environ.get("BACKEND_SLOTS", "2")))
SECONDS = float(os.environ.get("BACKEND_SECONDS", "0.008"))
TIMEOUT = float(os.environ.get("BACKEND_TIMEOUT", "30"))

_witness = os.environ.get("WITNESS_LOG")
# One write per record to an O_APPEND file: records of different workers
# never interleave.
_witness_fd = os.open(_witness, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if _witness else None


def witness(event: str, request_id: str) -> None:
    if _witness_fd is not None:
        os.write(_witness_fd, f"{time.monotonic_ns()} {os.getpid()} {event} {request_id}\n".encode())


def backend_call() -> None:
    time.sleep(SECONDS)  # stands for a database, GPU or third-party API call


def app(environ: Dict[str, Any],
        start_response: Callable[[str, List[Tuple[str, str]]], Any]) -> Iterable[bytes]:
    request_id = parse_qs(environ.get("QUERY_STRING", "")).get("id", ["-"])[0]
    witness("begin", request_id)
    try:
        permit = BACKEND.acquire(timeout=TIMEOUT)
    except shmsem.AcquisitionError as e:
        start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
        return [f"backend busy: {e.reason}\n".encode()]
    with permit:
        witness("enter", request_id)
        backend_call()
        witness("exit", request_id)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok\n"]
