#!/usr/bin/python3
"""Where are the fleet row's workers? Samples every descendant of a running
shmsem-bench (or any program) about three times a second and counts them by
what they are doing: asleep on the segment lock's futex word, asleep on
another word of the segment (a waiter slot), asleep on a private futex (the
lifeline thread), in nanosleep (a worker's 1 ms hold), running, or exited.

    build-release/bench/shmsem-bench \\
        --benchmark_filter='BM_FleetWorkers/workers:4000/shmsem' &
    bench/fleet_sampler.py $! 25

Reads /proc/PID/task/*/syscall, so run it as the benchmark's user or root.
A sample is not a snapshot: reading thousands of processes takes up to a
second, so a short state such as the 1 ms hold is counted for every worker
seen in it during that time, and may add up to more than the capacity.
"""
import glob
import sys
import time

SYS_FUTEX, SYS_NANOSLEEP, SYS_CLOCK_NANOSLEEP = "202", "35", "230"
# offsetof(segment_header, mutex) in layout version 4 (src/shm/layout.hpp): the
# identity fields and the key fill the first 0x130 bytes, and the mutex is
# aligned to a cache line.
LOCK_OFFSET = 0x140


def children(pid):
    out = []
    for t in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            out += open(t).read().split()
        except OSError:
            pass
    return out


def descendants(pid):
    found, todo = [], children(pid)
    while todo:
        c = todo.pop()
        found.append(c)
        todo += children(c)
    return found


def segment_base(pid):
    try:
        for line in open(f"/proc/{pid}/maps"):
            if "/dev/shm/shmsem." in line:
                return int(line.split("-")[0], 16)
    except OSError:
        pass
    return None


def what(task, base):
    try:
        call = open(task + "/syscall").read().split()
        state = open(task + "/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
    if state == "Z":
        return "exited"
    if call[0] == "running":
        return "running"
    if call[0] == SYS_FUTEX:
        addr = int(call[1], 16)
        if base is not None and base <= addr < base + (1 << 32):
            return "segment lock" if addr - base == LOCK_OFFSET else "waiter slot"
        return "private futex"
    if call[0] in (SYS_NANOSLEEP, SYS_CLOCK_NANOSLEEP):
        return "in its hold"
    return "syscall " + call[0]


def main():
    root, seconds = int(sys.argv[1]), float(sys.argv[2])
    t0 = time.time()
    while time.time() - t0 < seconds:
        procs = descendants(root)
        base = next((b for b in map(segment_base, procs[:20]) if b is not None), None)
        counts = {}
        for p in procs:
            for task in glob.glob(f"/proc/{p}/task/*"):
                k = what(task, base)
                if k:
                    counts[k] = counts.get(k, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])
        print(f"t={time.time() - t0:5.1f}s processes={len(procs)} " +
              ", ".join(f"{n} {k}" for k, n in ranked), flush=True)
        time.sleep(0.3)


if __name__ == "__main__":
    main()
