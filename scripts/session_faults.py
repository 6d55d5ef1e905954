#!/usr/bin/env python3
"""Page faults of a tradb session's local workers, statement by statement.

    scripts/session_faults.py SCRIPT [--tradb ./tradb] [--db DIR] [-- ARGS...]

Pipes SCRIPT (which should turn `.timer on`) into a new embedded session
and samples, every 10 ms, the minor page faults of the shell's child
processes (its local workers, /proc/PID/stat). Each statement's
`Run Time:` line is printed with the faults taken since the line before
it: a fault is a page the worker touched for the first time, and on a
machine where fresh memory is slow (BENCHMARKS.md, *Fresh memory on this
machine*) those are what make a pass slower than the next. The
attribution is as fine as the sampling: a fault in the last 10 ms of a
statement may be counted with the next one. Stdlib only; Linux only.
"""
import argparse
import os
import shutil
import subprocess
import tempfile
import threading
import time


def worker_faults(shell_pid):
    """Minor faults summed over the processes whose parent is shell_pid."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == shell_pid:  # ppid
            total += int(fields[7])      # minflt
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("script")
    ap.add_argument("--tradb", default="./tradb")
    ap.add_argument("--db", help="database directory (default: a new temporary one)")
    ap.add_argument("args", nargs="*", help="more tradb options, after --")
    a = ap.parse_args()
    with open(a.script) as f:
        script = f.read()
    tmp = None if a.db else tempfile.mkdtemp(prefix="tradb-faults-")
    db = a.db or os.path.join(tmp, "db")
    p = subprocess.Popen([a.tradb] + a.args + [db], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    samples, done = [], threading.Event()

    def sample():
        while not done.is_set():
            samples.append((time.monotonic(), worker_faults(p.pid)))
            time.sleep(0.01)

    t = threading.Thread(target=sample)
    t.start()
    p.stdin.write(script)
    p.stdin.close()
    lines = [(time.monotonic(), line.rstrip("\n")) for line in p.stdout]
    rc = p.wait()
    done.set()
    t.join()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)

    def faults_at(when):
        seen = 0
        for at, n in samples:
            if at > when:
                break
            seen = n
        return seen

    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    before, n = 0, 0
    for at, line in lines:
        if not line.startswith("Run Time:"):
            continue
        n += 1
        now = faults_at(at)
        print("%4d  %-48s faults %9d  %7.1f MiB" % (n, line[len("Run Time: "):], now - before,
                                                    (now - before) * page_kib / 1024))
        before = now
    if rc:
        print("tradb exited with status %d" % rc)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
