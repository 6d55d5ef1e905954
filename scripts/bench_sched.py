#!/usr/bin/python3
"""scripts/bench_sched.py - `make bench-sched`: scheduler x memory budget x
workload -> makespan and peak memory.

Each block of statements runs as one graph of chunk tasks placed by m-SCT,
m-ETF or m-TOPO (SET scheduler = msct | metf | mtopo) within every worker's
--memory, and, as the peer measured in the same run, statement at a time
where the optimizer puts each node's tasks (SET scheduler = statement).
A scheduler places the tasks only where the optimizer's plan would hold
more than a worker's --memory; the "placed by" column says which ran.
For each memory budget the script starts fresh `tradb --worker --memory M`
processes on loopback (3 by default), loads the inputs (made by NumPy, the
same for every scheduler), and times each block with EXPLAIN ANALYZE
(FORMAT JSON) COMMIT: its measured makespan (from the first task sent to
the last output committed), the largest peak resident memory a worker
reported, and the schedule's predicted makespan and peak.  The outputs of
every scheduler are saved and compared with NumPy's before any time is
kept.  Rounds interleave the schedulers, so drift in the machine's load
spreads over all of them; the table gives medians and each scheduler's
makespan over the best median of its row group.

Usage: scripts/bench_sched.py [--tradb ./tradb] [--workers 3]
         [--memory 256M,24M] [--reps 3] [--only ffnn-step,matmul-sum]
         [--size default|small|large]
  (large adds mm-8k-sum: --size large --only mm-8k-sum --workers 2 --memory 64M)
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the suite's workers and FFNN reference)

SCHEDULERS = ["msct", "metf", "mtopo", "statement"]
LR = bench.LR


def ffnn_block():
    return ["H[n,h] = tanh(SUM(X[n,d] * W1[d,h]));",
            "dO[n,l] = sigmoid(SUM(H[n,h] * W2[h,l])) - Y[n,l];",
            "dW2[h,l] = SUM(H[n,h] * dO[n,l]);",
            "dH[n,h] = SUM(dO[n,l] * W2[h,l]) * (1 - H[n,h] * H[n,h]);",
            "dW1[d,h] = SUM(X[n,d] * dH[n,h]);",
            "W1n[d,h] = W1[d,h] - %g * dW1[d,h];" % LR,
            "W2n[h,l] = W2[h,l] - %g * dW2[h,l];" % LR]


def ffnn_numpy(v):
    return bench.ffnn(v, np)


def mm_numpy(v):
    return {"r": (v["A"].astype(np.float64) @ v["B"]).sum(axis=1)}


def workloads(size):
    """name -> (inputs {name: (array, chunk)}, block statements, outputs,
    NumPy reference)."""
    rng = np.random.default_rng(20261124)
    small = size == "small"
    n, d, h, l = (500, 200, 1000, 10) if small else (2000, 400, 4000, 10)
    cn, cd, ch = (125, 100, 250) if small else (500, 200, 1000)
    ff = {"X": (rng.uniform(-1, 1, (n, d)).astype(np.float32), (cn, cd)),
          "Y": (rng.uniform(0, 1, (n, l)).astype(np.float32), (cn, l)),
          "W1": (rng.uniform(-0.05, 0.05, (d, h)).astype(np.float32), (cd, ch)),
          "W2": (rng.uniform(-0.05, 0.05, (h, l)).astype(np.float32), (ch, l))}
    m, k, j, c = (512, 512, 256, 128) if small else (2048, 2048, 1024, 256)
    mm = {"A": (rng.uniform(-1, 1, (m, k)).astype(np.float32), (c, c)),
          "B": (rng.uniform(-1, 1, (k, j)).astype(np.float32), (c, c))}
    out = {
        "ffnn-step": (ff, ffnn_block(), ["dW1", "dW2", "W1n", "W2n"], ffnn_numpy),
        "matmul-sum": (mm, ["C[i,j] = A[i,k] * B[k,j];", "r[i] = SUM(C[i,j]);"], ["r"], mm_numpy),
    }
    if size == "large":
        # 8192 x 8192 by 8192 x 2048, f32 (384 MB of tensors), the case
        # run on two workers of 64 MB each
        big = {"A": (rng.uniform(-1, 1, (8192, 8192)).astype(np.float32), (1024, 1024)),
               "B": (rng.uniform(-1, 1, (8192, 2048)).astype(np.float32), (1024, 1024))}
        out["mm-8k-sum"] = (big, out["matmul-sum"][1], ["r"], mm_numpy)
    return out


def tradb_run(tradb, eps, db, script):
    r = subprocess.run([tradb, "--workers", ",".join(eps), db], input=script, capture_output=True,
                       text=True, timeout=1800)
    if r.returncode:
        sys.exit("bench_sched: tradb failed: %s\n%s" % (r.stderr, script[:400]))
    return r.stdout


def one(tradb, eps, db, sched, block):
    """One timed run of the block under sched: the EXPLAIN ANALYZE JSON."""
    script = "SET scheduler = %s;\nBEGIN;\n%s\nEXPLAIN ANALYZE (FORMAT JSON) COMMIT;\n" % (sched, "\n".join(block))
    out = tradb_run(tradb, eps, db, script)
    d = json.loads(out[out.index("{"):])
    sc = d.get("schedule", {})
    return {"makespan": d["measured_makespan_s"],
            "peak": max(s["peak_memory_bytes"] for s in d["per_site"] if s["state"] == "up"),
            "pred": sc.get("predicted_makespan_s"),
            "pred_peak": max((s["predicted_peak_memory_bytes"] for s in sc.get("per_worker", [])), default=None),
            "waves": sc.get("waves"), "by": sc.get("placed_by", "-")}


def check(tradb, eps, db, top, sched, block, outs, want):
    saves = "".join("SAVE %s TO '%s/%s_%s.npy';\n" % (o, top, o, sched) for o in outs)
    tradb_run(tradb, eps, db, "SET scheduler = %s;\nBEGIN;\n%s\nCOMMIT;\n%s" % (sched, "\n".join(block), saves))
    for o in outs:
        got = np.load("%s/%s_%s.npy" % (top, o, sched))
        if not np.allclose(got, want[o], rtol=1e-3, atol=1e-3):
            sys.exit("bench_sched: %s under %s differs from NumPy's by %g" % (o, sched, abs(got - want[o]).max()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tradb", default="./tradb")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--memory", default="256M,24M")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="")
    ap.add_argument("--size", default="default", choices=["default", "small", "large"])
    a = ap.parse_args()
    tradb = os.path.abspath(a.tradb)
    wl = workloads(a.size)
    names = [w for w in wl if not a.only or w in a.only.split(",")]
    rows = []
    for mem in a.memory.split(","):
        top = tempfile.mkdtemp(prefix="tradb-bench-sched-")
        ws = bench.Workers(tradb, top, a.workers, os.path.join(top, "bench.log"), ["--memory", mem])
        eps = ws.endpoints.split(",")
        try:
            db = os.path.join(top, "db")
            for name in names:
                inputs, block, outs, ref = wl[name]
                loads = ""
                for t, (arr, chunk) in inputs.items():
                    np.save(os.path.join(top, t + ".npy"), arr)
                    loads += "LOAD %s FROM '%s/%s.npy' CHUNK [%s];\n" % (t, top, t, ", ".join(map(str, chunk)))
                tradb_run(tradb, eps, db, loads)
                want = ref({t: arr for t, (arr, _) in inputs.items()})
                for s in SCHEDULERS:
                    check(tradb, eps, db, top, s, block, outs, want)
                runs = {s: [] for s in SCHEDULERS}
                for _ in range(a.reps):
                    for s in SCHEDULERS:
                        runs[s].append(one(tradb, eps, db, s, block))
                best = min(statistics.median(r["makespan"] for r in runs[s]) for s in SCHEDULERS[:3])
                for s in SCHEDULERS:
                    r = runs[s]
                    med = statistics.median(x["makespan"] for x in r)
                    rows.append((name, mem, s, med, med / best, max(x["makespan"] for x in r) - min(x["makespan"] for x in r),
                                 statistics.median(x["peak"] for x in r), r[0]["pred"], r[0]["pred_peak"], r[0]["waves"], r[0]["by"]))
        finally:
            ws.stop()
            shutil.rmtree(top, ignore_errors=True)
    print("%d workers, %d runs each (medians; spread = max - min); makespan ratio against the best of "
          "m-SCT, m-ETF and m-TOPO in the same row group" % (a.workers, a.reps))
    print("%-11s %-7s %-10s %-10s %10s %7s %9s %10s %11s %12s %5s" % (
        "workload", "memory", "scheduler", "placed by", "makespan", "/best", "spread", "peak RSS", "predicted",
        "pred. peak", "waves"))
    for (name, mem, s, med, ratio, spread, peak, pred, pp, waves, by) in rows:
        print("%-11s %-7s %-10s %-10s %9.3fs %6.2fx %8.3fs %8.1fMB %10s %12s %5s" % (
            name, mem, s, by, med, ratio, spread, peak / 1e6, "-" if pred is None else "%.3fs" % pred,
            "-" if pp is None else "%.1fMB" % (pp / 1e6), "-" if waves is None else waves))


if __name__ == "__main__":
    main()
