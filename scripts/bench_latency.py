#!/usr/bin/env python3
"""bench_latency.py - what a statement costs when its work is nothing: a
session that makes a 64 x 64 tensor of 2 x 2 chunks, then runs N times
the elementwise statement `C[i,j] = A[i,j] * 2;` and quits, timed from the
process's start to its exit, less the same session without the N
statements; per statement.  Against Dask's threaded scheduler computing
the same graph (`(A * 2).persist()` on an array of the same chunks), the
peer whose per-graph overhead a user of small steps would meet.

    scripts/bench_latency.py [--n 600] [--reps 7] [--workers 2,4]
                             [--tradb PATH ...] [--dir D]

--tradb may be given more than once (another build, to compare two in one
run); every system runs once per round, the rounds interleaved, so that a
burst of load on this shared machine falls on all alike.  Prints a
markdown table: the median milliseconds per statement and each over
Dask's.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SETUP = "CREATE TENSOR A[64, 64] CHUNK [32, 32];\nFILL A UNIFORM(-1, 1) SEED 1;\n"
STMT = "C[i,j] = A[i,j] * 2;\n"

DASK = """
import sys, time
import numpy as np
import dask, dask.array as da
n = int(sys.argv[1])
a = da.from_array(np.random.default_rng(1).uniform(-1, 1, (64, 64)).astype(np.float32),
                  chunks=32).persist(scheduler="threads")
c = (a * 2).persist(scheduler="threads")
t0 = time.perf_counter()
for _ in range(n):
    c = (a * 2).persist(scheduler="threads")
print((time.perf_counter() - t0) / n)
"""


def session(tradb, workers, script, d):
    """Seconds from a tradb session's start to its exit on a fresh
    database."""
    db = os.path.join(d, "db")
    shutil.rmtree(db, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run([tradb, "--local-workers", str(workers), "--bail", db], input=script,
                   text=True, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def tradb_per_statement(tradb, workers, n, d):
    base = session(tradb, workers, SETUP, d)
    full = session(tradb, workers, SETUP + STMT * n, d)
    return (full - base) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=600, help="statements a session (default 600)")
    ap.add_argument("--reps", type=int, default=7, help="rounds (default 7)")
    ap.add_argument("--workers", default="2,4", help="local workers, comma-separated (default 2,4)")
    ap.add_argument("--tradb", action="append", help="a tradb binary (default ./tradb); again "
                    "for another build")
    ap.add_argument("--dir", help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    builds = args.tradb or ["./tradb"]
    counts = [int(x) for x in args.workers.split(",")]
    d = args.dir or tempfile.mkdtemp(prefix="tradb-latency-")
    python = sys.executable
    systems = [("tradb %s, %d workers" % (b, w), b, w) for w in counts for b in builds]
    got = {name: [] for name, _, _ in systems}
    got["dask-threads"] = []
    try:
        for r in range(args.reps):
            for name, b, w in systems:
                got[name].append(tradb_per_statement(b, w, args.n, d))
            out = subprocess.run([python, "-c", DASK, str(args.n)], text=True,
                                 stdout=subprocess.PIPE, check=True).stdout
            got["dask-threads"].append(float(out))
            print("round %d: %s" % (r + 1, ", ".join(
                "%s %.3f ms" % (k, v[-1] * 1e3) for k, v in got.items())), file=sys.stderr)
    finally:
        if not args.dir:
            shutil.rmtree(d, ignore_errors=True)
    peer = statistics.median(got["dask-threads"])
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    print()
    print("| system | ms per statement (median of %d) | over dask-threads |" % args.reps)
    print("|---|---:|---:|")
    for name, v in got.items():
        m = statistics.median(v)
        print("| %s | %.3f | %.2f |" % (name, m * 1e3, m / peer))


if __name__ == "__main__":
    main()
