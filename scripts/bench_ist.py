#!/usr/bin/python3
"""make bench-ist: independent subnet training against data-parallel SGD.

Trains the same network (ReLU hidden layers with per-neuron normalisation,
softmax output; scripts/ist.py writes the statements) by IST and by
data-parallel SGD on tradb with n local workers and n data shards, on
scikit-learn's digits (1797 x 64, 10 classes; 360 test examples held out
by a fixed seed) and on a larger synthetic classification set
(sklearn.datasets.make_classification).  Both methods see the same
mini-batches in the same order and train the same number of epochs; the
only difference is what happens to the weights.

Every training assignment runs as EXPLAIN ANALYZE (FORMAT JSON), so the
floats it moved between workers are measured, not estimated; a method's
"floats moved" is their sum (slices of the data shards and FILLs are not
assignments and are not counted; both methods take the same slices).
"seconds" is the sum of the shell's Run Time of the training statements
(`.timer on`), without the evaluations after each epoch.  Replication is
set to 1 so that only what a plan moves is counted, not the copies kept
for safety.

Writes bench-out/ist.md (the table), ist.dat and ist.svg (test accuracy
against seconds, one line per method and data set, as the thesis's
Figure 2.4), and ist.log.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ist  # noqa: E402

TIMER = re.compile(r"^Run Time: real ([0-9.]+)")


def log(msg):
    print(msg, flush=True)


def synthetic(count, features, classes):
    from sklearn.datasets import make_classification
    X, y = make_classification(n_samples=count, n_features=features,
                               n_informative=features // 2, n_classes=classes,
                               n_clusters_per_class=1, class_sep=2.0, random_state=7)
    return (X - X.mean(0)) / X.std(0), y


def analyzed(stmt):
    """EXPLAIN ANALYZE (FORMAT JSON) of an assignment (a slice or FILL as
    it is)."""
    if re.match(r"^\w+\[", stmt):
        return "EXPLAIN ANALYZE (FORMAT JSON) " + stmt
    return stmt


def run(tradb, workdir, stmts, workers, logf):
    """Run the tagged statements in one shell; the curve of (seconds,
    accuracy) after each epoch and the floats moved by training."""
    text = ".bail on\nSET replication = 1;\n.timer on\n" + "\n".join(
        analyzed(s) if tag == "train" else s for s, tag in stmts) + "\n"
    t0 = time.time()
    p = subprocess.run([tradb, "--local-workers", str(workers)], input=text, text=True,
                       capture_output=True, cwd=workdir)
    wall = time.time() - t0
    logf.write(p.stdout[-20000:] + p.stderr)
    if p.returncode != 0:
        raise RuntimeError("tradb failed (status %d): %s" % (p.returncode, p.stderr[-2000:]))
    times, floats, accs, pending = [], 0, [], None
    lines = p.stdout.splitlines()
    for i, line in enumerate(lines):
        mt = TIMER.match(line)
        if mt:
            times.append(float(mt.group(1)))
        elif line.startswith("{"):
            floats += json.loads(line)["measured_transfer_floats"]
        elif line.startswith("acc[]"):
            pending = float(lines[i + 1])
            accs.append(pending)
    if len(times) != len(stmts):
        raise RuntimeError("%d statements but %d timings" % (len(stmts), len(times)))
    curve, secs, epoch = [], 0.0, 0
    for (s, tag), t in zip(stmts, times):
        if tag == "train":
            secs += t
        elif tag == "acc":
            curve.append((secs, accs[epoch]))
            epoch += 1
    return {"curve": curve, "floats": floats, "seconds": secs, "wall": wall}


def median_run(reps):
    """The runs' medians: seconds at each epoch's end, floats moved (the
    accuracies are the same in every run: the same seeds, the same
    batches)."""
    med = lambda xs: float(np.median(xs))
    curve = [(med([r["curve"][e][0] for r in reps]), reps[0]["curve"][e][1])
             for e in range(len(reps[0]["curve"]))]
    return {"curve": curve, "floats": med([r["floats"] for r in reps]),
            "seconds": med([r["seconds"] for r in reps]), "reps": len(reps),
            "accuracies_differ": any([c[1] for c in r["curve"]] != [c[1] for c in curve]
                                     for r in reps)}


def first_reach(curve, level):
    for secs, acc in curve:
        if acc >= level:
            return secs
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tradb", default="./tradb")
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--epochs", type=int, default=10, help="epochs on digits")
    ap.add_argument("--synthetic-epochs", type=int, default=3)
    ap.add_argument("--synthetic", default="6000,64,10",
                    help="examples,features,classes of the synthetic set")
    ap.add_argument("--only", choices=["digits", "synthetic"])
    ap.add_argument("--local-steps", type=int, default=11, help="J: IST steps per round")
    ap.add_argument("--reps", type=int, default=3, help="runs of each case (medians)")
    ap.add_argument("--seed", type=int, default=20261124, help="the train/test split's")
    a = ap.parse_args()
    try:
        import sklearn  # noqa: F401
    except ImportError:
        log("bench-ist: python3-sklearn is not installed (scripts/install-deps.sh)")
        return 77
    os.makedirs(a.out, exist_ok=True)
    tradb = os.path.abspath(a.tradb)
    logf = open(os.path.join(a.out, "ist.log"), "w")
    cases = []
    if a.only in (None, "digits"):
        cases.append(("digits", ist.digits(), 360, [64, 512, 512, 10], 32, 0.1, [2], a.epochs))
    if a.only in (None, "synthetic"):
        cnt, feat, cls = (int(x) for x in a.synthetic.split(","))
        cases.append(("synthetic %dx%d" % (cnt, feat), synthetic(cnt, feat, cls), cnt // 6,
                      [feat, 256, 256, cls], 64, 0.1, [2, 4], a.synthetic_epochs))
    rows, curves = [], []
    for name, (X, y), test, sizes, batch, lr, counts, epochs in cases:
        for n in counts:
            data, m = ist.split(X, y, test, a.seed, n)
            work = os.path.join(a.out, "ist-work")
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            for k, v in data.items():
                np.save(os.path.join(work, k + ".npy"), v)
            net = ist.Net(sizes, n, batch, lr)
            for method in ("ist", "dp"):
                log("bench-ist: %s, %s, %d workers, %d epochs" % (name, method, n, epochs))
                logf.write("\n==== %s %s %d workers\n" % (name, method, n))
                prog = ist.program(net, method, m, epochs, a.local_steps, 1)
                reps = [run(tradb, work, prog, n, logf) for _ in range(a.reps)]
                r = median_run(reps)
                label = "IST (J=%d)" % a.local_steps if method == "ist" else "data parallel"
                rows.append((name, label, n, epochs, r, sizes, batch))
                curves.append(("%s, %s, %d workers" % (label, name, n), r["curve"]))
                log("  %.1f s, %.3g floats, accuracy %s" % (
                    r["seconds"], r["floats"], " ".join("%.3f" % c[1] for c in r["curve"])))
            shutil.rmtree(work, ignore_errors=True)
    write_md(a, rows, chart(a.out, curves))
    return 0


def chart(outdir, curves):
    """ist.dat and, with gnuplot, ist.svg: accuracy against seconds."""
    dat = os.path.join(outdir, "ist.dat")
    with open(dat, "w") as f:
        for title, curve in curves:
            f.write("# %s\n" % title)
            for secs, acc in curve:
                f.write("%.3f %.4f\n" % (secs, acc))
            f.write("\n\n")
    if not shutil.which("gnuplot"):
        log("bench-ist: gnuplot not found (install gnuplot-nox): no chart")
        return None
    svg = os.path.join(outdir, "ist.svg")
    # IST solid, data parallel dashed; one colour per data set and workers
    plots = ", ".join("'%s' index %d with linespoints lc %d dt %d title '%s'"
                      % (dat, i, i // 2 + 1, 1 if t.startswith("IST") else 2, t)
                      for i, (t, _) in enumerate(curves))
    gp = os.path.join(outdir, "ist.gp")
    with open(gp, "w") as f:
        f.write("set terminal svg size 900,520 dynamic font 'sans,12' background rgb 'white'\n"
                "set output '%s'\nset xlabel 'training seconds (tradb, %d cores)'\n"
                "set ylabel 'test accuracy'\nset key bottom right\nset grid\n"
                "set yrange [0:1]\nplot %s\n" % (svg, os.cpu_count(), plots))
    subprocess.run(["gnuplot", gp], check=True)
    return svg


def write_md(a, rows, svg):
    path = os.path.join(a.out, "ist.md")
    with open(path, "w") as f:
        f.write("# Independent subnet training against data-parallel SGD on tradb\n\n")
        f.write("`make bench-ist` (scripts/bench_ist.py), %s, %d cores, load average %s at "
                "the end; seconds are medians of %d runs.\n\n"
                % (time.strftime("%Y-%m-%d %H:%M"), os.cpu_count(),
                   " ".join("%.1f" % x for x in os.getloadavg()), a.reps))
        f.write("| data set | network | method | workers | epochs | seconds | floats moved "
                "| test accuracy | seconds to 0.90 |\n|---|---|---|---|---|---|---|---|---|\n")
        for name, label, n, epochs, r, sizes, batch in rows:
            reach = first_reach(r["curve"], 0.90)
            f.write("| %s | %s, batch %d per worker | %s | %d | %d | %.1f | %.3g | %.3f | %s |\n"
                    % (name, "-".join(map(str, sizes)), batch, label, n, epochs, r["seconds"],
                       r["floats"], r["curve"][-1][1],
                       "%.1f" % reach if reach is not None else "not reached"))
        f.write("\nAccuracy after each epoch:\n\n")
        for name, label, n, epochs, r, sizes, batch in rows:
            f.write("- %s, %s, %d workers: %s\n" % (name, label, n, ", ".join(
                "%.3f (%.1f s)" % (acc, secs) for secs, acc in r["curve"])))
        if any(r["accuracies_differ"] for _, _, _, _, r, _, _ in rows):
            f.write("\nThe accuracies differed between runs of a case (the order of "
                    "floating-point sums); those of the first run are shown.\n")
        if svg:
            f.write("\n![test accuracy against seconds](ist.svg)\n")
    log("bench-ist: wrote %s" % path)


if __name__ == "__main__":
    sys.exit(main())
