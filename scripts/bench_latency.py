#!/usr/bin/env python3
"""bench_latency.py - what a statement costs beyond its arithmetic: a
session makes a tensor, then runs the elementwise statement
`C[i,j] = A[i,j] * 2;` N times and quits, timed from the process's start
to its exit, less the same session without the N statements; per
statement.  Cases: `tiny`, a 64 x 64 tensor of 2 x 2 chunks (N 600:
planning, the round trips to the workers, the commit), and `many`, a
4096 x 4096 tensor of 64 x 64 chunks (4096 of them, N 8: what each chunk
costs), whose statements are long enough to time one by one: the median
of the session's `.timer` times (Dask's: of its persists), since the
session's start and end (writing 4096 chunk files) would drown them.  A
third, `transpose`, times `C[i,j] = A[i,j] + A[j,i];` on a 4096 x 4096
tensor of 1024 x 1024 chunks the same way: an elementwise kernel reading
one operand across its rows.  Against Dask's threaded scheduler computing
the same graph (`(A * 2).persist()`, `(A + A.T).persist()` on an array of
the same chunks), the peer whose per-graph and per-task overhead a user
of such steps would meet.  And `start`: a session that runs nothing, on
a database holding an 8192 x 8192 tensor of 1024 x 1024 chunks (made
once per build and worker count, 256 MiB on each of 2 workers), from the
process's start to its exit: what a user waits for the prompt.  Its peer
is Python opening the same array as a user of NumPy and Dask would,
`import numpy, dask.array` and `numpy.load` of its .npy, mapped (read
lazily, as tradb reads its chunks), also timed from start to exit.

    scripts/bench_latency.py [--case tiny,many,transpose,start] [--reps 7] [--workers 2,4]
                             [--tradb PATH ...] [--dir D]

--tradb may be given more than once (another build, to compare two in one
run); every system runs once per round, the rounds interleaved, so that a
burst of load on this shared machine falls on all alike.  Prints a
markdown table per case: the median milliseconds per statement and each
over Dask's.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# name: (extent, chunk, statements a session, timed one by one, statement,
# Dask's expression of it)
CASES = {"tiny": (64, 32, 600, False, "C[i,j] = A[i,j] * 2;\n", "a * 2"),
         "many": (4096, 64, 8, True, "C[i,j] = A[i,j] * 2;\n", "a * 2"),
         "transpose": (4096, 1024, 8, True, "C[i,j] = A[i,j] + A[j,i];\n", "a + a.T"),
         "start": (8192, 1024, 0, False, "", "")}

OPEN = """
import sys
import numpy as np
import dask.array
np.load(sys.argv[1], mmap_mode="r")
"""


def setup(n, c):
    return "CREATE TENSOR A[%d, %d] CHUNK [%d, %d];\nFILL A UNIFORM(-1, 1) SEED 1;\n" % (n, n, c, c)


DASK = """
import sys, time
import numpy as np
import dask, dask.array as da
n, c, k, each = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "True"
expr = sys.argv[5]
a = da.from_array(np.random.default_rng(1).uniform(-1, 1, (n, n)).astype(np.float32),
                  chunks=c).persist(scheduler="threads")
r = eval(expr).persist(scheduler="threads")
ts = []
t0 = time.perf_counter()
for _ in range(k):
    t = time.perf_counter()
    r = eval(expr).persist(scheduler="threads")
    ts.append(time.perf_counter() - t)
print(sorted(ts)[len(ts) // 2] if each else (time.perf_counter() - t0) / k)
"""


def session(tradb, workers, script, d):
    """Seconds from a tradb session's start to its exit on a fresh
    database, and the `Run Time` seconds it printed."""
    db = os.path.join(d, "db")
    shutil.rmtree(db, ignore_errors=True)
    t0 = time.perf_counter()
    out = subprocess.run([tradb, "--local-workers", str(workers), "--bail", db], input=script,
                         text=True, stdout=subprocess.PIPE, check=True).stdout
    return time.perf_counter() - t0, [float(x) for x in re.findall(r"^Run Time: real ([0-9.]+)",
                                                                  out, re.M)]


def session_start(tradb, workers, d):
    """Seconds from the start to the exit of a tradb session that runs
    nothing, on a database made (and saved as a .npy for the peer) the
    first time this build and worker count ask."""
    n, c = CASES["start"][:2]
    db = os.path.join(d, "start-%d-%s" % (workers, re.sub(r"\W", "_", tradb)))
    if not os.path.isdir(db):
        subprocess.run([tradb, "--local-workers", str(workers), "--bail", db], text=True,
                       input=setup(n, c) + "SAVE A TO '%s';\n" % os.path.join(d, "start.npy"),
                       stdout=subprocess.DEVNULL, check=True)
    t0 = time.perf_counter()
    subprocess.run([tradb, "--local-workers", str(workers), "--bail", db], input="", text=True,
                   stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def tradb_per_statement(tradb, workers, case, d):
    if case == "start":
        return session_start(tradb, workers, d)
    n, c, k, each, stmt, _ = CASES[case]
    if each:
        _, ts = session(tradb, workers, setup(n, c) + ".timer on\n" + stmt * k, d)
        if len(ts) != k:
            raise SystemExit("%s: %d Run Time lines, expected %d" % (tradb, len(ts), k))
        return statistics.median(ts)
    base, _ = session(tradb, workers, setup(n, c), d)
    full, _ = session(tradb, workers, setup(n, c) + stmt * k, d)
    return (full - base) / k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="tiny,many,transpose,start",
                    help="cases, comma-separated (default tiny,many,transpose,start)")
    ap.add_argument("--reps", type=int, default=7, help="rounds (default 7)")
    ap.add_argument("--workers", default="2,4", help="local workers, comma-separated (default 2,4)")
    ap.add_argument("--tradb", action="append", help="a tradb binary (default ./tradb); again "
                    "for another build")
    ap.add_argument("--dir", help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    builds = args.tradb or ["./tradb"]
    counts = [int(x) for x in args.workers.split(",")]
    cases = args.case.split(",")
    for case in cases:
        if case not in CASES:
            ap.error("no case %r (the cases: %s)" % (case, ", ".join(CASES)))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench import same_blas_kernels
    print("OpenBLAS kernels, every system: %s" % same_blas_kernels(builds[0]))
    d = args.dir or tempfile.mkdtemp(prefix="tradb-latency-")
    python = sys.executable
    systems = [("tradb %s, %d workers" % (b, w), b, w) for w in counts for b in builds]
    got = {case: {name: [] for name in [s[0] for s in systems] + ["dask-threads"]} for case in cases}
    try:
        for r in range(args.reps):
            for case in cases:
                g = got[case]
                for name, b, w in systems:
                    g[name].append(tradb_per_statement(b, w, case, d))
                n, c, k, each, _, expr = CASES[case]
                if case == "start":
                    t0 = time.perf_counter()
                    subprocess.run([python, "-c", OPEN, os.path.join(d, "start.npy")], check=True)
                    g["dask-threads"].append(time.perf_counter() - t0)
                    continue
                out = subprocess.run([python, "-c", DASK, str(n), str(c), str(k), str(each), expr],
                                     text=True, stdout=subprocess.PIPE, check=True).stdout
                g["dask-threads"].append(float(out))
                print("round %d, %s: %s" % (r + 1, case, ", ".join(
                    "%s %.3f ms" % (k, v[-1] * 1e3) for k, v in g.items())), file=sys.stderr)
    finally:
        if not args.dir:
            shutil.rmtree(d, ignore_errors=True)
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    for case in cases:
        n, c, k, each, stmt, _ = CASES[case]
        g = got[case]
        peer = statistics.median(g["dask-threads"])
        print()
        if case == "start":
            print("start: a session that runs nothing, on a database of a %d x %d f32 tensor in "
                  "%d x %d chunks; the peer: Python importing NumPy and Dask and mapping its "
                  ".npy (the dask-threads row)" % (n, n, c, c))
        else:
            print("%s: `%s` on %d x %d f32 in %d x %d chunks, %d statements a session%s" % (
                case, stmt.strip(), n, n, c, c, k, ", the median statement" if each else ""))
        print()
        print("| system | ms per %s (median of %d) | over dask-threads |" % (
            "session, start to exit" if case == "start" else "statement", args.reps))
        print("|---|---:|---:|")
        for name, v in g.items():
            m = statistics.median(v)
            print("| %s | %.3f | %.2f |" % (name, m * 1e3, m / peer))


if __name__ == "__main__":
    main()
