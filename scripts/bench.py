#!/usr/bin/python3
"""scripts/bench.py - tradb's benchmark suite: the TRA paper's workloads
(section 6) scaled to one machine, against OpenBLAS, ScaLAPACK, NumPy and
Dask.  `make bench` runs it through scripts/bench.sh; see BENCHMARKS.md.

Usage:
  bench.py [--size default|large] [--reps R] [--only W1,W2] [--nworkers P]
           [--out DIR] [--write-md FILE] [--profile]
  bench.py --peer WORKLOAD DIR SIZE REPS P   (internal: the Python peers)

Workloads (all f32; inputs made by tradb's FILL, saved as .npy for peers):
  mm-general     C = A B, I = J = K                (paper 6.1, Table 3)
  mm-common-k    C = A B, K >> I = J               (a common large dimension)
  mm-two-large   C = A B, I = J >> K               (two large dimensions)
  nn-wide        nearest neighbour in the metric M: few points, many features
  nn-large       the same, many points, fewer features (paper 6.2)
  ffnn-speech    one SGD step of a two-layer FFNN (tanh hidden layer, sigmoid
                 outputs with cross-entropy loss): few features, very wide
                 hidden layer (paper 6.3, Google speech)
  ffnn-xml       the same, huge input and output, narrow hidden layer
                 (extreme classification, AmazonCat-14K)

Systems:
  tradb             the embedded default: the shell starts one local worker
                    per core
  tradb-workers     `--workers`: P `tradb --worker` processes on loopback
                    started by the suite, one kernel thread each
  openblas          one cblas_sgemm call on all cores (matmul only;
                    scripts/bench_gemm.c)
  scalapack         psgemm under `mpirun -np P`, one BLAS thread per rank
                    (matmul only; scripts/bench_psgemm.c)
  numpy             the same steps with numpy on all cores
  dask-threads      dask.array with tradb's chunk shapes, threaded scheduler
  dask-distributed  the same on a dask.distributed LocalCluster of P worker
                    processes with one thread each

Timing: one tradb session per configuration creates and fills the inputs,
then runs the workload's statements R + 1 times with `.timer on`; the first
pass is a warm-up and is dropped; a sample is the sum of one pass's
"Run Time: real" values, so start-up and set-up are not counted.  Every other system likewise runs one
untimed warm-up and R timed passes; dask results are persisted (kept in the
cluster as tradb keeps its results on the workers).  The table gives
medians.

Correctness: NumPy in f64 on the same inputs is the reference.  Every
system's outputs are compared with it (max abs error <= 1e-3 * max |ref|
per output) before its time is reported; on any mismatch or failure the
suite reports no times and exits 1.

Output: the table on stdout; DIR (default ./bench-out) gets results.md,
samples.json, ratios.dat, ratios.svg (gnuplot) and bench.log.  --write-md
FILE replaces the part of FILE between the markers
<!-- bench-results:begin --> and <!-- bench-results:end --> with the
results and copies the chart to docs/bench-ratios.svg beside FILE.

--profile: instead of comparing, run each workload's passes on the suite's
`--workers` under `perf record` and write DIR/profile-WORKLOAD.txt: the
statement times, perf's top shared objects and symbols, the time spent in
system calls and page faults, and EXPLAIN ANALYZE of every statement.

Environment: TRADB (default ./tradb), TMPDIR (scratch space).
"""
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"
TOL = 1e-3
PEERS_PY = ("numpy", "dask-threads", "dask-distributed")
SYSTEMS = ("tradb", "tradb-workers", "openblas", "scalapack") + PEERS_PY
WORKLOAD_NAMES = ("mm-general", "mm-common-k", "mm-two-large", "nn-wide",
                  "nn-large", "ffnn-speech", "ffnn-xml")
LR = 0.01


class Workload:
    """One benchmark: tradb's tensors and statements, and the same
    computation for the Python peers (`compute`, numpy or dask arrays)."""

    def __init__(self, name, title, size, tensors, derived, stmts, outputs,
                 compute, gemm=False):
        self.name = name
        self.title = title        # what it computes, for the table
        self.size = size          # the shapes, for the table
        self.tensors = tensors    # [(name, shape, chunk, fill)]
        self.derived = derived    # [(name, chunk, statement)]: untimed set-up
        self.stmts = stmts        # the timed statements
        self.outputs = outputs    # tensors checked against the reference
        self.compute = compute    # dict of input arrays -> dict of outputs
        self.gemm = gemm          # one A @ B: openblas and scalapack run it

    def inputs(self):
        return [t[0] for t in self.tensors] + [d[0] for d in self.derived]

    def chunks(self):
        c = {t[0]: tuple(t[2]) for t in self.tensors}
        c.update({d[0]: tuple(d[1]) for d in self.derived})
        return c


def matmul(v):
    return {"C": v["A"] @ v["B"]}


def nearest(v):
    diff = v["X"] - v["q"]
    proj = diff @ v["M"]
    dist = (proj * diff).sum(axis=1)
    return {"dist": dist, "m": dist.min()}


def ffnn(v):
    X, Y, W1, W2 = v["X"], v["Y"], v["W1"], v["W2"]
    H = np.tanh(X @ W1)
    dO = 1 / (1 + np.exp(-(H @ W2))) - Y
    dW2 = H.T @ dO
    dH = (dO @ W2.T) * (1 - H * H)
    dW1 = X.T @ dH
    return {"dW1": dW1, "dW2": dW2, "W1n": W1 - LR * dW1, "W2n": W2 - LR * dW2}


def workloads(size):
    """The seven workloads at SIZE ('default': the whole suite in a few
    minutes on 2 cores; 'large': about twice the work each)."""
    big = size == "large"
    u = "UNIFORM(-1, 1) SEED %d"
    out = []

    def mm(name, title, i, j, k, ci, cj, ck):
        out.append(Workload(
            name, title, "%dx%d * %dx%d" % (i, k, k, j),
            [("A", (i, k), (ci, ck), u % 1), ("B", (k, j), (ck, cj), u % 2)],
            [], ["C[i,j] = A[i,k] * B[k,j];"], ["C"], matmul, gemm=True))

    n = 5120 if big else 4096
    mm("mm-general", "matmul, general", n, n, n, 1024, 1024, 1024)
    # large: about twice the default's work per workload (every tensor
    # under 512 MB, as in the first large run)
    k = 98304 if big else 65536
    mm("mm-common-k", "matmul, common large dim", 1024, 1024, k, 1024, 1024, 8192)
    n = 10240 if big else 8192
    mm("mm-two-large", "matmul, two large dims", n, n, 1024, 2048, 2048, 1024)

    def nn(name, title, npts, d, cn, cd):
        out.append(Workload(
            name, title, "N=%d D=%d" % (npts, d),
            [("X", (npts, d), (cn, cd), u % 1), ("q", (d,), (cd,), u % 2),
             ("R", (256, d), (256, cd), "UNIFORM(-0.0625, 0.0625) SEED 3")],
            # the metric: M = R^T R, symmetric positive semi-definite
            [("M", (cd, cd), "M[d,e] = R[k,d] * R[k,e];")],
            ["Df[n,d] = X[n,d] - q[d];",
             "P[n,e] = Df[n,d] * M[d,e];",
             "dist[n] = SUM(P[n,e] * Df[n,e]);",
             "m[] = MIN(dist[n]);"],
            ["dist", "m"], nearest))

    if big:
        nn("nn-wide", "nearest neighbour, wide", 2048, 7168, 1024, 1792)
        nn("nn-large", "nearest neighbour, large", 64000, 1536, 8000, 1536)
    else:
        nn("nn-wide", "nearest neighbour, wide", 1024, 5120, 512, 1280)
        nn("nn-large", "nearest neighbour, large", 40000, 1024, 5000, 1024)

    def ff(name, title, npts, d, h, l, cn, cd, ch, cl):
        out.append(Workload(
            name, title, "N=%d D=%d H=%d L=%d" % (npts, d, h, l),
            [("X", (npts, d), (cn, cd), u % 1),
             ("Y", (npts, l), (cn, cl), "UNIFORM(0, 1) SEED 2"),
             ("W1", (d, h), (cd, ch), "UNIFORM(-0.05, 0.05) SEED 3"),
             ("W2", (h, l), (ch, cl), "UNIFORM(-0.05, 0.05) SEED 4")],
            [],
            ["H[n,h] = tanh(SUM(X[n,d] * W1[d,h]));",
             "dO[n,l] = sigmoid(SUM(H[n,h] * W2[h,l])) - Y[n,l];",
             "dW2[h,l] = SUM(H[n,h] * dO[n,l]);",
             "dH[n,h] = SUM(dO[n,l] * W2[h,l]) * (1 - H[n,h] * H[n,h]);",
             "dW1[d,h] = SUM(X[n,d] * dH[n,h]);",
             "W1n[d,h] = W1[d,h] - %g * dW1[d,h];" % LR,
             "W2n[h,l] = W2[h,l] - %g * dW2[h,l];" % LR],
            ["dW1", "dW2", "W1n", "W2n"], ffnn))

    if big:
        ff("ffnn-speech", "FFNN SGD step, speech-like", 4000, 400, 24000, 10,
           2000, 400, 6000, 10)
        ff("ffnn-xml", "FFNN SGD step, extreme classification", 1000, 100000,
           512, 15000, 500, 12500, 512, 3750)
    else:
        ff("ffnn-speech", "FFNN SGD step, speech-like", 2000, 400, 16000, 10,
           1000, 400, 4000, 10)
        ff("ffnn-xml", "FFNN SGD step, extreme classification", 1000, 50000,
           256, 15000, 500, 12500, 256, 3750)
    return out


def check(ref, got):
    """(ok, relative error): max |got - ref| <= TOL * max |ref|."""
    got = np.asarray(got)
    if got.shape != ref.shape:
        return False, "shape %s, expected %s" % (got.shape, ref.shape)
    if got.dtype != np.float32:
        return False, "dtype %s, expected float32" % got.dtype
    scale = float(np.max(np.abs(ref))) or 1.0
    err = float(np.max(np.abs(got.astype(np.float64) - ref))) / scale
    return bool(np.isfinite(err) and err <= TOL), err


# ---- the Python peers (a subprocess per workload) --------------------------

def peer_main(name, d, size, reps, nproc):
    """Compute the f64 reference (saved as ref-NAME.npy), then time and
    check numpy, dask-threads and dask-distributed; write d/peers.json."""
    import dask
    import dask.array as da
    from dask.distributed import Client, LocalCluster, wait
    from dask.graph_manipulation import clone

    w = {x.name: x for x in workloads(size)}[name]
    v = {n: np.load("%s/in-%s.npy" % (d, n)) for n in w.inputs()}
    ref = {k: np.asarray(x, dtype=np.float64)
           for k, x in w.compute({n: a.astype(np.float64) for n, a in v.items()}).items()}
    for k, x in ref.items():
        np.save("%s/ref-%s.npy" % (d, k), x)
    res = {"samples": {}, "checks": {}}

    def record(system, outs, times):
        checks = {k: check(ref[k], np.asarray(outs[k])) for k in w.outputs}
        res["checks"][system] = {k: [ok, err] for k, (ok, err) in checks.items()}
        res["samples"][system] = times
        log("  %s: %s" % (system, " ".join("%.4fs" % t for t in times)))

    def timed(run):
        """RUN() -> (outputs, seconds): one warm-up, whose outputs are what
        is checked, then REPS timed runs."""
        outs, _ = run()
        return outs, [run()[1] for _ in range(reps)]

    def numpy_run():
        t0 = time.perf_counter()
        outs = w.compute(v)
        return outs, time.perf_counter() - t0

    log("  numpy ...")
    outs, times = timed(numpy_run)
    record("numpy", outs, times)
    del outs

    chunks = w.chunks()

    def dask_run(persist):
        """PERSIST: a list of dask arrays -> the list persisted (computed)
        and held.  The inputs are persisted once; each run builds the graph
        anew with fresh keys (clone), so that no run can be handed results
        that an earlier one left behind, and times its persist."""
        names = list(v)
        arrs = dict(zip(names, persist([da.from_array(v[n], chunks=chunks[n]) for n in names])))
        seed = [0]

        def run():
            seed[0] += 1
            outs = w.compute(arrs)
            graph = clone(*outs.values(), omit=list(arrs.values()), seed=seed[0])
            graph = list(graph) if len(outs) > 1 else [graph]
            t0 = time.perf_counter()
            done = persist(graph)
            t = time.perf_counter() - t0
            return dict(zip(outs, done)), t

        outs, times = timed(run)
        return {k: x.compute() for k, x in outs.items()}, times

    log("  dask-threads ...")
    with dask.config.set(scheduler="threads"):
        outs, times = dask_run(lambda xs: list(dask.persist(*xs)))
    record("dask-threads", outs, times)
    del outs

    log("  dask-distributed (LocalCluster, %d workers x 1 thread) ..." % nproc)
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": env}):
        with LocalCluster(n_workers=nproc, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:

            def persist(xs):
                out = client.persist(xs)
                wait(out)
                return out

            outs, times = dask_run(persist)
    record("dask-distributed", outs, times)
    with open("%s/peers.json" % d, "w") as f:
        json.dump(res, f)
    return 0


# ---- the driver ------------------------------------------------------------

LOG = None


T0 = time.time()


def log(msg):
    msg = "[%4.0fs] %s" % (time.time() - T0, msg)
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()
    if LOG:
        LOG.write(msg + "\n")
        LOG.flush()


class Failure(Exception):
    pass


def run(cmd, logname, timeout=1800, env=None, stdin=None, input=None):
    """Run CMD (stdin from the file STDIN or the text INPUT), its stderr to
    the log; return its stdout (text)."""
    with open(logname, "a") as errf:
        errf.write("$ %s\n" % " ".join(cmd))
        errf.flush()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=errf, stdin=stdin,
                           input=input, env=env, timeout=timeout, text=True)
    with open(logname, "a") as f:
        f.write(p.stdout)
    if p.returncode != 0:
        raise Failure("%s exited with status %d (see %s)" % (cmd[0], p.returncode, logname))
    return p.stdout


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Workers:
    """P `tradb --worker` processes on loopback, one kernel thread each."""

    def __init__(self, tradb, scratch, p, logname):
        self.procs, eps = [], []
        for i in range(p):
            ep = "tcp://127.0.0.1:%d" % free_port()
            wlog = "%s/worker%d.log" % (scratch, i)
            with open(wlog, "w") as f:
                self.procs.append(subprocess.Popen(
                    [tradb, "--worker", "--listen", ep, "--data", "%s/worker%d" % (scratch, i),
                     "--threads", "1"], stdout=subprocess.DEVNULL, stderr=f))
            deadline = time.time() + 30
            while not self._listening(wlog):
                if self.procs[-1].poll() is not None or time.time() > deadline:
                    self.stop()
                    raise Failure("worker %d did not start (see %s)" % (i, wlog))
                time.sleep(0.05)
            eps.append(ep)
        self.endpoints = ",".join(eps)
        log("bench: started %d tradb workers: %s" % (p, self.endpoints))

    @staticmethod
    def _listening(wlog):
        with open(wlog) as f:
            return "listening" in f.read()

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def setup_lines(w):
    """Create and fill the inputs, and make the derived ones (untimed)."""
    lines = []
    for name, shape, chunk, fill in w.tensors:
        lines.append("CREATE TENSOR %s[%s] CHUNK [%s] TYPE f32;"
                     % (name, ", ".join(map(str, shape)), ", ".join(map(str, chunk))))
        lines.append("FILL %s %s;" % (name, fill))
    return lines + [stmt for name, chunk, stmt in w.derived]


def timed_lines(w, reps):
    """The statements REPS + 1 times under `.timer on` (the first pass is
    the warm-up)."""
    return [".timer on"] + w.stmts * (reps + 1) + [".timer off"]


def drop_lines(w):
    made = set(w.inputs()) | {re.match(r"\s*(\w+)\[", s).group(1) for s in w.stmts}
    return ["DROP TENSOR IF EXISTS %s;" % n for n in sorted(made)]


def pass_times(w, out, reps, tag):
    """From tradb's output, the statement times of passes 1..REPS (pass 0
    is the warm-up): a list of REPS lists of len(w.stmts) seconds."""
    t = [float(x) for x in re.findall(r"^Run Time: real ([0-9.]+)", out, re.M)]
    k = len(w.stmts)
    if len(t) != (reps + 1) * k:
        raise Failure("%s: expected %d 'Run Time' lines, got %d"
                      % (tag, (reps + 1) * k, len(t)))
    return [t[i * k:(i + 1) * k] for i in range(1, reps + 1)]


def run_tradb(w, d, reps, tag, cmd, save_inputs, logname):
    """One tradb session: set-up, SAVE the inputs (for the peers) if asked,
    the timed passes, SAVE the outputs, DROP everything.  Returns the
    passes' statement times (see pass_times)."""
    lines = setup_lines(w)
    if save_inputs:
        lines += ["SAVE %s TO '%s/in-%s.npy';" % (n, d, n) for n in w.inputs()]
    lines += timed_lines(w, reps)
    lines += ["SAVE %s TO '%s/%s-%s.npy';" % (n, d, tag, n) for n in w.outputs]
    lines += drop_lines(w)
    script = "%s/%s.tql" % (d, tag)
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(script) as f:
        out = run(cmd + ["--bail"], logname, stdin=f)
    return pass_times(w, out, reps, tag)


def parse_times(out, word, reps, what):
    t = [float(x) for x in re.findall(r"^%s ([0-9.]+)" % word, out, re.M)]
    if len(t) != reps:
        raise Failure("%s: expected %d timings, got %d" % (what, reps, len(t)))
    return t


def median(xs):
    return statistics.median(xs) if xs else None


def build_peers(outdir, logname):
    gemm = "%s/bench_gemm" % outdir
    psgemm = "%s/bench_psgemm" % outdir
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "openblas"],
                           stdout=subprocess.PIPE, text=True, check=True).stdout.split()
    run(["gcc", "-O2", "-o", gemm, "%s/bench_gemm.c" % HERE] + flags, logname)
    run(["mpicc", "-O2", "-o", psgemm, "%s/bench_psgemm.c" % HERE, "-lscalapack-openmpi"],
        logname)
    return {"gemm": gemm, "psgemm": psgemm}


MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")


def fmt_ratio(a, b):
    return "%.2f" % (a / b) if a and b else "-"


def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 2**20
    return "nproc %d, CPU %s, %.0f GiB memory" % (os.cpu_count(), cpu, mem)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def report(results, args, p, started, load0, wall, tradb):
    """The markdown results: a header, the table and the losses."""
    ver = subprocess.run([tradb, "--version"], stdout=subprocess.PIPE,
                         text=True).stdout.strip().replace("\n", " ")
    lines = [
        "- date: %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "- machine: %s" % machine(),
        "- tradb: %s; tradb and tradb-workers: %d workers; ScaLAPACK: %d MPI ranks;"
        " dask-distributed: %d worker processes x 1 thread" % (ver, p, p, p),
        "- command: `%s`" % args.cmdline,
        "- load average (1/5/15 min) at start: %s; at end: %s (a shared machine: other"
        " work slows every system, unevenly)" % (load0, loadavg()),
        "- %d timed runs per system after one untimed warm-up; the medians are in seconds;"
        " wall time of the whole suite: %.0f s" % (args.reps, wall),
        "- every result was checked against NumPy in f64 (max abs error <= %g x max |ref|"
        " per output) before its time was kept" % TOL,
        "",
        "| workload | size | system | median s | runs | tradb / system | tradb-workers / system |",
        "|---|---|---|---|---|---|---|",
    ]
    losses = []
    for w, samples, _ in results:
        t0 = median(samples.get("tradb"))
        t1 = median(samples.get("tradb-workers"))
        for s in SYSTEMS:
            if s not in samples:
                continue
            m = median(samples[s])
            lines.append("| %s | %s | %s | %.3f | %d | %s | %s |" % (
                w.name, w.size, s, m, len(samples[s]), fmt_ratio(t0, m), fmt_ratio(t1, m)))
            if s not in ("tradb", "tradb-workers") and t0 and t0 > m:
                losses.append((t0 / m, w.name, s))
    lines.append("")
    if losses:
        losses.sort(reverse=True)
        lines.append("tradb (embedded) is slower than: " + "; ".join(
            "%s on %s (x%.2f)" % (s, n, r) for r, n, s in losses) + ".")
    else:
        lines.append("tradb (embedded) is at least as fast as every peer on every workload.")
    lines += ["", "Where tradb's time goes, statement by statement (medians, seconds):", "",
              "| workload | statement | tradb | tradb-workers |", "|---|---|---|---|"]
    for w, _, stmts in results:
        for i, st in enumerate(w.stmts):
            lines.append("| %s | `%s` | %.3f | %.3f |" % (
                w.name, st, stmts["tradb"][i], stmts["tradb-workers"][i]))
    return "\n".join(lines) + "\n"


def chart(results, outdir, logname):
    """ratios.dat and, with gnuplot, ratios.svg: tradb / peer per workload."""
    peers = [s for s in SYSTEMS if s not in ("tradb", "tradb-workers")]
    dat = "%s/ratios.dat" % outdir
    with open(dat, "w") as f:
        f.write("workload " + " ".join(peers) + "\n")
        for w, samples, _ in results:
            t0 = median(samples.get("tradb"))
            f.write(w.name + " " + " ".join(
                "%.4f" % (t0 / median(samples[s])) if s in samples else "-"
                for s in peers) + "\n")
    if not shutil.which("gnuplot"):
        log("bench: gnuplot not found (install gnuplot-nox): no chart")
        return None
    svg = "%s/ratios.svg" % outdir
    n = len(peers)
    plot = """
set terminal svg size 1000,520 dynamic font 'sans,12' background rgb 'white'
set output '%s'
set title 'tradb (embedded, %d local workers): time / peer time (above 1: the peer is faster)'
set datafile missing '-'
set key autotitle columnhead top left horizontal
set logscale y 2
set yrange [0.125:16]
set ytics ('1/8' 0.125, '1/4' 0.25, '1/2' 0.5, '1' 1, '2' 2, '4' 4, '8' 8, '16' 16)
set ylabel 'tradb / peer (log scale)'
set grid ytics
set xrange [-0.6:%d.6]
set xtics nomirror
set style fill solid 0.85 border -1
set arrow from graph 0, first 1 to graph 1, first 1 nohead lw 2 lc rgb 'black' front
w = 0.8 / %d
x(i) = column(0) - 0.4 + (i - 1.5) * w
up(v) = v >= 1 ? v : NaN
down(v) = v < 1 ? v : NaN
plot for [i=2:%d] '%s' using (x(i)):(column(i)):(x(i) - w / 2):(x(i) + w / 2):(1):(column(i)) \\
       with boxxyerror, \\
     for [i=2:%d] '' using (x(i)):(up(column(i))):(sprintf('%%.2f', column(i))) \\
       with labels rotate by 90 left offset 0,0.3 font ',8' notitle, \\
     for [i=2:%d] '' using (x(i)):(down(column(i))):(sprintf('%%.2f', column(i))) \\
       with labels rotate by 90 right offset 0,-0.3 font ',8' notitle, \\
     '' using 0:(NaN):xtic(1) notitle
""" % (svg, os.cpu_count(), len(results) - 1, n, n + 1, dat, n + 1, n + 1)
    with open("%s/ratios.gp" % outdir, "w") as f:
        f.write(plot)
    run(["gnuplot", "%s/ratios.gp" % outdir], logname)
    return svg


def write_md(path, results_md, svg):
    begin, end = "<!-- bench-results:begin -->", "<!-- bench-results:end -->"
    with open(path) as f:
        text = f.read()
    if begin not in text or end not in text:
        raise Failure("%s has no %s ... %s markers" % (path, begin, end))
    body = results_md
    if svg:
        docs = os.path.join(os.path.dirname(os.path.abspath(path)), "docs")
        os.makedirs(docs, exist_ok=True)
        shutil.copy(svg, os.path.join(docs, "bench-ratios.svg"))
        body += "\n![tradb / peer per workload](docs/bench-ratios.svg)\n"
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w") as f:
        f.write(head + begin + "\n" + body + end + tail)
    log("bench: results written into %s" % path)


def bench_workload(w, d, args, tradb, workers, tools, logname):
    """Run workload W on every system, check every result against the
    reference.  Returns (samples: system -> seconds per run, stmts: tradb
    system -> median seconds per statement, failures)."""
    samples, checks, stmts, failed = {}, {}, {}, []
    p = args.nworkers
    log("  tradb (embedded) ...")
    passes = {"tradb": run_tradb(w, d, args.reps, "tradb", [tradb], True, logname)}
    log("  tradb-workers ...")
    passes["tradb-workers"] = run_tradb(
        w, d, args.reps, "tradb-workers", [tradb, "--workers", workers.endpoints],
        False, logname)
    for s, ps in passes.items():
        samples[s] = [sum(x) for x in ps]
        stmts[s] = [median(list(x)) for x in zip(*ps)]
        log("  %s: %s" % (s, " ".join("%.4fs" % t for t in samples[s])))
    if w.gemm:
        a, b = "%s/in-A.npy" % d, "%s/in-B.npy" % d
        log("  openblas ...")
        out = run([tools["gemm"], str(args.reps), "C=A*B", "%s/openblas-C.npy" % d,
                   "A=" + a, "B=" + b], logname)
        samples["openblas"] = parse_times(out, "gemm", args.reps, "bench_gemm")
        log("  scalapack (mpirun -np %d) ..." % p)
        out = run(["mpirun", "-np", str(p), "-x", "OPENBLAS_NUM_THREADS=1",
                   tools["psgemm"], str(args.reps), "256", "C=A*B", "%s/scalapack-C.npy" % d,
                   "A=" + a, "B=" + b],
                  logname, env=MPI_ENV)
        samples["scalapack"] = parse_times(out, "psgemm", args.reps, "bench_psgemm")
    log("  python peers (reference, numpy, dask) ...")
    run([PYTHON, os.path.abspath(__file__), "--peer", w.name, d, args.size,
         str(args.reps), str(p)], logname)
    with open("%s/peers.json" % d) as f:
        peers = json.load(f)
    samples.update(peers["samples"])
    checks.update(peers["checks"])
    ref = {k: np.load("%s/ref-%s.npy" % (d, k)) for k in w.outputs}
    for s in ("tradb", "tradb-workers", "openblas", "scalapack"):
        if s in samples:
            checks[s] = {}
            for k in w.outputs:
                ok, err = check(ref[k], np.load("%s/%s-%s.npy" % (d, s, k)))
                checks[s][k] = [ok, err]
    for s in SYSTEMS:
        if s not in checks:
            continue
        bad = {k: e for k, (ok, e) in checks[s].items() if not ok}
        if bad:
            failed.append("%s on %s: %s" % (s, w.name, bad))
            log("bench: WRONG: %s on %s differs from numpy: %s" % (s, w.name, bad))
            del samples[s]
        else:
            log("  check %s: ok (max rel error %s)" % (s, ", ".join(
                "%s %.1e" % (k, e) for k, (ok, e) in checks[s].items())))
    return samples, stmts, failed


def profile_workload(w, d, args, tradb, workers, outdir, logname):
    """--profile: run W's passes on the suite's workers under `perf record`
    (attached to the worker processes, sampling with call graphs), then
    EXPLAIN ANALYZE each statement; write outdir/profile-NAME.txt with the
    statement times, the plans as run and perf's top DSOs and symbols."""
    db = "%s/db" % d
    cmd = [tradb, "--workers", workers.endpoints, "--bail", db]
    script = "%s/setup.tql" % d
    with open(script, "w") as f:
        f.write("\n".join(setup_lines(w)) + "\n")
    with open(script) as f:
        run(cmd, logname, stdin=f)
    data = "%s/perf-%s.data" % (outdir, w.name)
    perf = subprocess.Popen(["perf", "record", "-q", "-F", "999", "-g", "-o", data, "-p",
                             ",".join(str(x.pid) for x in workers.procs)],
                            stdout=subprocess.DEVNULL, stderr=open(logname, "a"))
    time.sleep(1)
    try:
        out = run(cmd, logname, input="\n".join(timed_lines(w, args.reps)) + "\n")
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait(timeout=120)
    ps = pass_times(w, out, args.reps, "profile")
    explain = run(cmd, logname, input="\n".join(
        ["EXPLAIN ANALYZE %s" % st for st in w.stmts] + drop_lines(w)) + "\n")
    rep = []
    for sort, children in (("dso", "--no-children"), ("dso,sym", "--no-children"),
                           ("sym", "--children")):
        r = subprocess.run(["perf", "report", "-i", data, children, "--sort", sort,
                            "--stdio", "-g", "none", "--percent-limit", "0.5"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        rep.append("\n".join(x for x in r.stdout.splitlines() if x and not x.startswith("#")))
    # inclusive time under each system call and in page faults
    rep[2] = "\n".join(x for x in rep[2].splitlines()
                       if re.search(r"\] (__x64_sys_\w+|ksys_\w+|do_writev|exc_page_fault)$", x))
    path = "%s/profile-%s.txt" % (outdir, w.name)
    with open(path, "w") as f:
        f.write("%s (%s), %s: %d tradb workers (--workers), %d timed passes\n\n"
                % (w.name, w.title, w.size, args.nworkers, args.reps))
        f.write("median seconds per statement:\n")
        for st, ts in zip(w.stmts, zip(*ps)):
            f.write("  %8.3f  %s\n" % (median(list(ts)), st))
        f.write("  %8.3f  (one pass)\n\n" % median([sum(x) for x in ps]))
        f.write("perf, the workers' samples by shared object:\n%s\n\n" % rep[0])
        f.write("perf, by symbol:\n%s\n\n" % rep[1])
        f.write("perf, inclusive (with callees) in system calls and page faults:\n%s\n\n"
                % rep[2])
        f.write("EXPLAIN ANALYZE:\n%s" % explain)
    log("bench: profile of %s in %s (perf data %s)" % (w.name, path, data))


def parse_args(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="bench.sh", description="tradb's benchmark suite")
    ap.add_argument("--size", choices=("default", "large"), default="default")
    ap.add_argument("--reps", type=int, default=3, help="timed runs per system (default 3)")
    ap.add_argument("--only", default="", help="comma-separated workloads (default: all)")
    ap.add_argument("--nworkers", type=int, default=os.cpu_count(),
                    help="tradb --workers processes, ScaLAPACK ranks and dask-distributed"
                    " workers (default: nproc)")
    ap.add_argument("--out", default="bench-out", help="output directory (default bench-out)")
    ap.add_argument("--write-md", metavar="FILE", help="put the results into FILE")
    ap.add_argument("--profile", action="store_true",
                    help="instead of comparing: profile tradb (--workers) on each workload"
                    " with perf, into DIR/profile-WORKLOAD.txt")
    args = ap.parse_args(argv)
    if args.reps < 1 or args.nworkers < 1:
        ap.error("--reps and --nworkers must be positive")
    names = [x for x in args.only.split(",") if x]
    for x in names:
        if x not in WORKLOAD_NAMES:
            ap.error("unknown workload '%s' (known: %s)" % (x, ", ".join(WORKLOAD_NAMES)))
    args.names = names or list(WORKLOAD_NAMES)
    args.cmdline = " ".join(["scripts/bench.sh"] + argv)
    return args


def main(argv):
    global LOG
    if argv[:1] == ["--peer"]:
        if len(argv) != 6:
            sys.stderr.write("usage: bench.py --peer WORKLOAD DIR SIZE REPS P\n")
            return 2
        return peer_main(argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]))
    args = parse_args(argv)
    started, load0 = time.time(), loadavg()
    tradb = os.path.abspath(os.environ.get("TRADB", "./tradb"))
    if not os.access(tradb, os.X_OK):
        log("bench: no tradb binary at %s (set TRADB or run make)" % tradb)
        return 1
    for tool, pkg in (("mpicc", "libopenmpi-dev"), ("mpirun", "openmpi-bin"),
                      ("pkg-config", "pkg-config")) + ((("perf", "linux-perf"),)
                                                       if args.profile else ()):
        if not shutil.which(tool):
            log("bench: %s not found (scripts/install-deps.sh installs %s)" % (tool, pkg))
            return 1
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        log("bench: %s cannot import dask.distributed (install python3-distributed)" % PYTHON)
        return 1
    outdir = os.path.abspath(args.out)
    os.makedirs(outdir, exist_ok=True)
    for f in ("results.md", "samples.json", "ratios.dat", "ratios.svg"):
        if os.path.exists(os.path.join(outdir, f)):
            os.remove(os.path.join(outdir, f))  # never leave a stale result behind
    logname = "%s/bench.log" % outdir
    open(logname, "w").close()
    LOG = open("%s/progress.log" % outdir, "w")
    p = args.nworkers
    log("bench: %s, %d workloads, %d reps, %d workers; log %s"
        % (args.size, len(args.names), args.reps, p, logname))
    tools = build_peers(outdir, logname)
    scratch = tempfile.mkdtemp(prefix="tradb-bench.", dir=os.environ.get("TMPDIR", "/tmp"))
    results, failed = [], []
    workers = None
    try:
        workers = Workers(tradb, scratch, p, logname)
        wls = [w for w in workloads(args.size) if w.name in args.names]
        for i, w in enumerate(wls):
            t_w = time.time()
            d = "%s/%s" % (scratch, w.name)
            os.makedirs(d)
            if args.profile:
                profile_workload(w, d, args, tradb, workers, outdir, logname)
                continue
            log("bench: [%d/%d] %s (%s): %s" % (i + 1, len(wls), w.name, w.title, w.size))
            samples, stmts, bad = bench_workload(w, d, args, tradb, workers, tools, logname)
            failed += bad
            results.append((w, samples, stmts))
            shutil.rmtree(d, ignore_errors=True)
            log("bench: %s done in %.0f s; %s" % (w.name, time.time() - t_w, ", ".join(
                "%s %.3f" % (s, median(samples[s])) for s in SYSTEMS if s in samples)))
    except (Failure, subprocess.TimeoutExpired) as e:
        log("bench: FAILED: %s" % e)
        return 1
    finally:
        if workers:
            workers.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if args.profile:
        return 0
    if failed:
        log("bench: FAILED: results differ from numpy, no times reported:\n  "
            + "\n  ".join(failed))
        return 1
    with open("%s/samples.json" % outdir, "w") as f:
        json.dump({w.name: {"samples": s, "statements": dict(
            zip(w.stmts, zip(*(st[k] for k in ("tradb", "tradb-workers")))))}
            for w, s, st in results}, f, indent=1)
    wall = time.time() - started
    md = report(results, args, p, started, load0, wall, tradb)
    try:
        svg = chart(results, outdir, logname)
        with open("%s/results.md" % outdir, "w") as f:
            f.write(md)
        sys.stdout.write(md)
        if args.write_md:
            write_md(args.write_md, md, svg)
    except Failure as e:
        log("bench: FAILED: %s" % e)
        return 1
    log("bench: done in %.0f s: %s/results.md, %s" % (wall, outdir, svg or "no chart"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
