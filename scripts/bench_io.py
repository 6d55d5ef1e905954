#!/usr/bin/env python3
"""bench_io.py - getting data into tradb and out of it: a fresh session
that LOADs a .npy file (or FILLs a tensor) and quits, timed from the
process's start to its exit, by when every replica of the tensor is
written and synced (the workers write what they hold when their shell
closes, README *What is guaranteed for stored data*); and one that SAVEs a
tensor stored before to a .npy file (synced, as SAVE does).  Against NumPy
doing the same in a fresh process: np.load (or drawing the array) and
np.save to a file, fsync'd (for SAVE, the array it loads is the one
stored).

    scripts/bench_io.py [--n 8192] [--reps 5] [--tradb PATH ...] [--dir D]

--tradb may be given more than once (another build, to compare two in one
run); every system runs once per round, the rounds interleaved, so that a
burst of load on this shared machine falls on all alike.  Prints a
markdown table: medians of wall and CPU seconds (the process and its
children: the shell and its local workers) and each over NumPy's.
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

NUMPY = {
    "load": "import numpy as np, os, sys\n"
            "a = np.load(sys.argv[1])\n",
    "fill": "import numpy as np, os, sys\n"
            "n = int(sys.argv[2])\n"
            "a = np.random.default_rng(1).uniform(-1, 1, (n, n)).astype(np.float32)\n",
}
NUMPY["save"] = NUMPY["load"]
SAVE = ("with open(sys.argv[3], 'wb') as f:\n"
        "    np.save(f, a)\n"
        "    f.flush()\n"
        "    os.fsync(f.fileno())\n")


def timed(cmd, stdin=None):
    """Wall and CPU seconds (children's user + system) of cmd."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0 or "Error" in r.stdout or "Error" in r.stderr:
        sys.exit("bench_io: %s failed:\n%s%s" % (cmd[0], r.stdout, r.stderr))
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=8192, help="the tensor is N x N f32 (default 8192: 256 MiB)")
    ap.add_argument("--reps", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--tradb", action="append", help="tradb binary (default ./tradb); may repeat")
    ap.add_argument("--dir", help="scratch directory (default: a new one under $TMPDIR)")
    a = ap.parse_args()
    bins = a.tradb or ["./tradb"]
    scratch = tempfile.mkdtemp(prefix="bench_io-", dir=a.dir)
    npy, out = os.path.join(scratch, "x.npy"), os.path.join(scratch, "y.npy")
    try:
        subprocess.run([sys.executable, "-c",
                        "import numpy as np, sys\n"
                        "n = int(sys.argv[2])\n"
                        "np.save(sys.argv[1], np.random.default_rng(2).uniform(-1, 1, (n, n)).astype(np.float32))\n",
                        npy, str(a.n)], check=True)
        create = "CREATE TENSOR X[%d, %d] CHUNK [1024, 1024];\n" % (a.n, a.n)
        scripts = {"load": create + "LOAD X FROM '%s';\n" % npy,
                   "fill": create + "FILL X UNIFORM(-1, 1) SEED 1;\n",
                   "save": "SAVE X TO '%s';\n" % out}
        kept = {}  # binary -> its database holding X, for SAVE (set up untimed)
        for i, b in enumerate(bins):
            kept[b] = os.path.join(scratch, "kept%d" % i)
            timed([b, kept[b]], scripts["load"])
        res = {}
        for rep in range(a.reps):
            for what in ("load", "fill", "save"):
                for b in bins:
                    db = kept[b] if what == "save" else os.path.join(scratch, "db")
                    if what != "save":
                        shutil.rmtree(db, ignore_errors=True)
                    res.setdefault((what, b), []).append(timed([b, db], scripts[what]))
                    if os.path.exists(out):
                        os.unlink(out)  # each writes a new file, as a user would
                res.setdefault((what, "numpy"), []).append(
                    timed([sys.executable, "-c", NUMPY[what] + SAVE, npy, str(a.n), out]))
                os.unlink(out)
        print("| what | system | wall s (median) | CPU s (median) | wall / NumPy | CPU / NumPy |")
        print("|---|---|---:|---:|---:|---:|")
        for what in ("load", "fill", "save"):
            ref = [statistics.median(x[i] for x in res[(what, "numpy")]) for i in (0, 1)]
            for s in bins + ["numpy"]:
                w, c = (statistics.median(x[i] for x in res[(what, s)]) for i in (0, 1))
                print("| %s %d x %d f32 | %s | %.2f | %.2f | %.2f | %.2f |" % (
                    what, a.n, a.n, s, w, c, w / ref[0], c / ref[1]))
        print("\n%d rounds; load average at the end: %s" % (a.reps, " ".join(
            "%.2f" % x for x in os.getloadavg())))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
