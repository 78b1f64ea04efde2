"""tests/package/consumer/two_process.py: the Python consumer. It imports the
installed shmsem and runs one semaphore across two processes:

  parent: Semaphore(key, 1), acquire ...... child: used == 1, try_acquire is None
  parent: release ......................... child's blocked acquire wins
  child:  release, exit 0;  parent: used == 0, remove(key)

The child is this script again, in a fresh interpreter; the processes talk
over pipes, never by sleeping. Exit status 0 means every check held.

usage: python3 two_process.py KEY
"""

import os
import subprocess
import sys

import shmsem


def check(ok, what):
    if not ok:
        sys.exit(f"two_process.py {'child' if CHILD else 'parent'}: FAILED: {what}")


CHILD = len(sys.argv) == 3 and sys.argv[1] == "--child"


def child(key):
    s = shmsem.Semaphore(key, permits=1)
    check(s.used == 1, f"the parent's seat is not visible: used = {s.used}")
    check(s.try_acquire() is None, "try_acquire won a seat the parent holds")
    print("F", flush=True)
    check(sys.stdin.readline().strip() == "R", "no word from the parent")
    with s.acquire(timeout=30):
        check(s.used == 1, "used is not 1 while the child holds the seat")


def parent(key):
    s = shmsem.Semaphore(key, permits=1)
    p = s.acquire(timeout=30)
    c = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", key],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(c.stdout.readline().strip() == "F", "the child did not find the semaphore full")
    p.release()
    c.stdin.write("R\n")
    c.stdin.flush()
    check(c.wait(60) == 0, "the child failed")
    check(s.used == 0, "a seat is still used")
    check(shmsem.Semaphore.remove(key), "remove found no semaphore")
    print(f"two_process.py: ok (shmsem {shmsem.__version__} from {os.path.dirname(shmsem.__file__)})")


if __name__ == "__main__":
    if CHILD:
        child(sys.argv[2])
    elif len(sys.argv) == 2:
        parent(sys.argv[1])
    else:
        sys.exit("usage: two_process.py KEY")
