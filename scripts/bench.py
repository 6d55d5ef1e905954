#!/usr/bin/python3
"""scripts/bench.py - tradb's benchmark suite: the workloads of the TRA
paper (section 6), of EinDecomp (matrix chains, an attention layer) and of
the matrix-format thesis (a DAG of products), scaled to one machine,
against OpenBLAS, ScaLAPACK, NumPy, PyTorch and Dask.  `make bench` runs it
through scripts/bench.sh; see BENCHMARKS.md.

Usage:
  bench.py [--size default|large|small] [--reps R] [--rounds N] [--only W1,W2]
           [--nworkers P] [--time-limit S] [--out DIR] [--write-md FILE]
           [--synchronous V1,V2] [--cold] [--profile]
  bench.py --peer SYSTEM WORKLOAD DIR SIZE REPS P   (internal: a Python
           peer, or SYSTEM 'reference', in a process of its own)

Workloads (all f32; inputs made by tradb's FILL, saved as .npy for peers):
  mm-general     C = A B, I = J = K                (paper 6.1, Table 3)
  mm-common-k    C = A B, K >> I = J               (a common large dimension)
  mm-two-large   C = A B, I = J >> K               (two large dimensions)
  nn-wide        nearest neighbour in the metric M: few points, many features
  nn-large       the same, many points, fewer features (paper 6.2)
  nn-typed       nn-large as a user types it: a 2.5 s pause before each
                 statement (tradb; the peers pause before each pass, their
                 arrays in memory meanwhile), so each statement starts on
                 workers that have gone idle
  ffnn-speech    one SGD step of a two-layer FFNN (tanh hidden layer, sigmoid
                 outputs with cross-entropy loss): few features, very wide
                 hidden layer (paper 6.3, Google speech)
  ffnn-xml       the same, huge input and output, narrow hidden layer
                 (extreme classification, AmazonCat-14K)
  attention      one multi-head attention layer, "first token" inference
                 over a prompt (EinDecomp experiment 3): Q/K/V projections,
                 scores, softmax as MAX / exp / SUM, the weighted sum of V,
                 the output projection
  chain3-square, chain4-square, chain3-mixed, chain4-mixed
                 matrix chains of 3 and 4 operands, square and mixed shapes
                 (EinDecomp experiment 1): hand-split into pairwise
                 statements (tradb, tradb-workers), and as one statement
                 (tradb:1-stmt, tradb-workers:1-stmt)
  format-dag     the matrix-format thesis's chain (chapter 11): T1 = A B,
                 T2 = C D, O = ((T1 E)(T1 T2))(T2 F), seven products of
                 mixed shapes, as one block; with tradb's default chunking
                 and the layout chosen (tradb, tradb-workers), with every
                 matrix, inputs and intermediates, in square tiles (the
                 thesis's all-tile plan: tradb:tiles, under SET layout =
                 declared), and with the inputs in tiles and the layout
                 chosen (tradb:tiles-auto)
  gram           G = X^T X, a Gram matrix (symmetric: half of it is new
                 work), X in tradb's default chunks (tradb) and in row
                 blocks of the whole width (tradb:row-blocks)
  covariance     the covariance of the same X: mu = MEAN(X[n,d]), then
                 SUM((X[n,d] - mu[d]) * (X[n,e] - mu[e])) / (N - 1)
  mm-cold        a fresh session's first statement: C = A B on 4096 x 4096
                 right after FILL in a new tradb process, no warm-up; every
                 peer likewise times its first product in a new process

Systems:
  tradb             the embedded default: the shell starts one local worker
                    per core
  tradb-workers     `--workers`: P `tradb --worker` processes on loopback
                    started by the suite, each with the kernel threads the
                    shell gives a local worker (2 x cores / P)
  tradb:TAG, tradb-workers:TAG
                    the same two on another form of the workload (other
                    statements or chunk shapes, the same outputs)
  openblas          cblas_sgemm calls on all cores, one per product
                    (products only; scripts/bench_gemm.c)
  scalapack         psgemm under `mpirun -np P`, one BLAS thread per rank,
                    one call per product (products only;
                    scripts/bench_psgemm.c)
  numpy             the same steps with numpy on all cores
  torch             the same steps with PyTorch on the CPU, one process,
                    torch.set_num_threads(nproc) (its BLAS, OpenBLAS as
                    NumPy's, on all cores too), under torch.no_grad()
  dask-threads      dask.array with tradb's chunk shapes ("auto" where
                    tradb chooses), threaded scheduler
  dask-distributed  the same on a dask.distributed LocalCluster of P worker
                    processes with one thread each
A peer that is not installed (no torch, dask, mpicc, ...) is skipped with a
note in the results, not a failure; numpy is required (the reference).

Timing: a tradb session of its own makes the inputs and saves them for
the peers, untimed.  The R timed passes are split into N rounds
(--rounds, default 3, at most R), and in each round every system runs its
share, one system after another, so that a burst of load on a shared
machine falls on one round of every system; the order is shuffled from
round to round, and the disks are synced after each system, so that no
system always runs right after the same one or during the write-back of
what the one before saved.  In a round, one tradb session per configuration
creates and fills the inputs, then runs the workload's statements k + 1
times with `.timer on` (k: the round's share of R); the first pass is a
warm-up and is dropped; a sample is the sum of one pass's "Run Time: real"
values, so start-up and set-up are not counted.  Every other system
likewise runs, per round, one process with one untimed warm-up and k timed
passes; dask results are persisted (kept in the cluster as tradb keeps its
results on the workers).  A cold workload (mm-cold) instead runs R fresh
sessions (tradb) or processes (peers) and times each one's first pass;
--cold times every workload that way, as a user's first statements after
loading data.  A typed workload (nn-typed) pauses before each timed
statement; the pauses are not counted.  The table gives medians.  A pass
that runs longer than --time-limit seconds (default 30) is interrupted
(SIGINT, as Ctrl-C) and reported as "timeout".

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
import math
import os
import queue
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PAUSE_S = 2.5  # a typed workload's pause before each statement: workers go idle after 2 s
PYTHON = "/usr/bin/python3"
TOL = 1e-3
C_PEERS = ("openblas", "scalapack")
PY_PEERS = ("numpy", "torch", "dask-threads", "dask-distributed")
PEERS = C_PEERS + PY_PEERS
TRADB = ("tradb", "tradb-workers")
LR = 0.01
SIZES = ("default", "large", "small")


class Variant:
    """Another form of a workload on tradb: other statements or other
    chunk shapes, the same outputs.  Its systems are tradb:TAG and
    tradb-workers:TAG; the peers run the workload once."""

    def __init__(self, tag, stmts=None, chunks=None, settings=None):
        self.tag = tag
        self.stmts = stmts        # None: the workload's
        self.chunks = chunks or {}  # tensor -> chunk shape (None: tradb's default)
        self.settings = list(settings or [])  # SET statements run first


class Workload:
    """One benchmark: tradb's tensors and statements, and the same
    computation for the peers (`compute`, on numpy, torch or dask arrays,
    with the functions of `xp`)."""

    def __init__(self, name, title, size, tensors, derived, stmts, outputs,
                 compute, products=None, variants=(), cold=False, pause=0.0):
        self.name = name
        self.title = title        # what it computes, for the table
        self.size = size          # the shapes, for the table
        self.tensors = tensors    # [(name, shape, chunk or None, fill)]
        self.derived = derived    # [(name, chunk, statement)]: untimed set-up
        self.stmts = stmts        # the timed statements
        self.outputs = outputs    # tensors checked against the reference
        self.compute = compute    # (dict of input arrays, ops) -> dict of outputs
        self.products = products  # ["T=B*C", "O=A*T"]: openblas and scalapack run it
        self.variants = list(variants)
        self.cold = cold          # time a fresh session's first pass
        self.pause = pause        # seconds a user waits before each statement

    def inputs(self):
        return [t[0] for t in self.tensors] + [d[0] for d in self.derived]

    def chunks(self):
        """Chunk shapes for dask: tradb's, or "auto" where tradb chooses."""
        c = {t[0]: tuple(t[2]) if t[2] else "auto" for t in self.tensors}
        c.update({d[0]: tuple(d[1]) for d in self.derived})
        return c

    def forms(self):
        """(tag, statements) of the primary form (tag None) and the variants."""
        return [(None, self.stmts)] + [(v.tag, v.stmts or self.stmts) for v in self.variants]

    def variant(self, tag):
        return next((v for v in self.variants if v.tag == tag), None)

    def systems(self):
        s = list(TRADB)
        for v in self.variants:
            s += [system_name(b, v.tag) for b in TRADB]
        return s + [p for p in PEERS if self.products or p not in C_PEERS]


def system_name(base, tag):
    return "%s:%s" % (base, tag) if tag else base


class NumpyOps:
    """What the workloads need beyond operators, for numpy arrays and
    dask arrays (dask dispatches NumPy's ufuncs)."""
    exp = staticmethod(np.exp)
    tanh = staticmethod(np.tanh)

    @staticmethod
    def amax(x, axis):
        return x.max(axis=axis, keepdims=True)

    @staticmethod
    def sum(x, axis, keepdims=False):
        return x.sum(axis=axis, keepdims=keepdims)


class TorchOps:
    """The same for torch tensors."""

    def __init__(self, torch):
        self.torch = torch
        self.exp = torch.exp
        self.tanh = torch.tanh

    def amax(self, x, axis):
        return self.torch.amax(x, dim=axis, keepdim=True)

    @staticmethod
    def sum(x, axis, keepdims=False):
        return x.sum(dim=axis, keepdim=keepdims)


def program(steps):
    """A chain of products, "T=B*C" ... (the last step is the output), as
    a compute function."""
    def compute(v, xp):
        env = dict(v)
        for st in steps:
            out, rhs = st.split("=")
            a, b = rhs.split("*")
            env[out] = env[a] @ env[b]
        return {out: env[out]}
    return compute


def nearest(v, xp):
    diff = v["X"] - v["q"]
    proj = diff @ v["M"]
    dist = xp.sum(proj * diff, 1)
    return {"dist": dist, "m": dist.min()}


def ffnn(v, xp):
    X, Y, W1, W2 = v["X"], v["Y"], v["W1"], v["W2"]
    H = xp.tanh(X @ W1)
    dO = 1 / (1 + xp.exp(-(H @ W2))) - Y
    dW2 = H.T @ dO
    dH = (dO @ W2.T) * (1 - H * H)
    dW1 = X.T @ dH
    return {"dW1": dW1, "dW2": dW2, "W1n": W1 - LR * dW1, "W2n": W2 - LR * dW2}


def attention(scale):
    """Multi-head attention: X (s x d), Wq, Wk, Wv (h x d x e), Wo
    (h x e x d); per head, softmax(Q K^T * scale) V, then the output
    projection summed over the heads (the concatenation of the heads
    times the output matrix)."""
    def compute(v, xp):
        X = v["X"]
        Q = X @ v["Wq"]                       # h x s x e
        K = X @ v["Wk"]
        V = X @ v["Wv"]
        S = (Q @ K.swapaxes(-1, -2)) * scale  # h x s x s
        E = xp.exp(S - xp.amax(S, -1))
        P = E / xp.sum(E, -1, keepdims=True)
        return {"O": xp.sum(P @ V @ v["Wo"], 0)}
    return compute


def workloads(size):
    """The workloads at SIZE ('default': the whole suite in about a
    quarter of an hour on 2 cores; 'large': about twice the work each;
    'small': a quick check of the harness, not a benchmark)."""
    big, small = size == "large", size == "small"
    u = "UNIFORM(-1, 1) SEED %d"
    out = []

    def pick(default, large, little):
        return large if big else little if small else default

    def mm(name, title, i, j, k, ci, cj, ck, cold=False):
        out.append(Workload(
            name, title, "%dx%d * %dx%d" % (i, k, k, j),
            [("A", (i, k), (ci, ck), u % 1), ("B", (k, j), (ck, cj), u % 2)],
            [], ["C[i,j] = A[i,k] * B[k,j];"], ["C"], program(["C=A*B"]),
            products=["C=A*B"], cold=cold))

    n, c = pick(4096, 5120, 1024), pick(1024, 1024, 256)
    mm("mm-general", "matmul, general", n, n, n, c, c, c)
    # large: about twice the default's work per workload (every tensor
    # under 512 MB, as in the first large run)
    k = pick(65536, 98304, 16384)
    c = pick(1024, 1024, 256)
    mm("mm-common-k", "matmul, common large dim", c, c, k, c, c, 8 * c)
    n, k = pick(8192, 10240, 2048), pick(1024, 1024, 256)
    mm("mm-two-large", "matmul, two large dims", n, n, k, 2 * k, 2 * k, k)

    def nn(name, title, npts, d, cn, cd, pause=0.0):
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
            ["dist", "m"], nearest, pause=pause))

    nn("nn-wide", "nearest neighbour, wide", *pick((1024, 5120, 512, 1280),
                                                   (2048, 7168, 1024, 1792),
                                                   (256, 1280, 128, 320)))
    large = pick((40000, 1024, 5000, 1024), (64000, 1536, 8000, 1536), (10000, 256, 1250, 256))
    nn("nn-large", "nearest neighbour, large", *large)
    nn("nn-typed", "nearest neighbour, large, as typed: 2.5 s before each statement", *large,
       pause=PAUSE_S)

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

    ff("ffnn-speech", "FFNN SGD step, speech-like",
       *pick((2000, 400, 16000, 10, 1000, 400, 4000, 10),
             (4000, 400, 24000, 10, 2000, 400, 6000, 10),
             (500, 100, 4000, 10, 250, 100, 1000, 10)))
    ff("ffnn-xml", "FFNN SGD step, extreme classification",
       *pick((1000, 50000, 256, 15000, 500, 12500, 256, 3750),
             (1000, 100000, 512, 15000, 500, 12500, 512, 3750),
             (250, 12500, 64, 3750, 125, 3125, 64, 1250)))

    # Attention, "first token" inference over a prompt of s tokens (LLaMA
    # 7B: d = 4096, 32 heads of e = 128, prompts of 1024-4096 tokens), no
    # causal mask: every token attends to the whole prompt.
    s, d, h, e = pick((2048, 1024, 8, 128), (2048, 1536, 12, 128), (512, 256, 4, 64))
    scale = 1 / math.sqrt(e)
    w = "UNIFORM(-0.05, 0.05) SEED %d"
    out.append(Workload(
        "attention", "attention layer, first-token inference",
        "s=%d d=%d heads=%d e=%d" % (s, d, h, e),
        [("X", (s, d), (s // 2, d), u % 1),
         ("Wq", (h, d, e), (h // 2, d, e), w % 2),
         ("Wk", (h, d, e), (h // 2, d, e), w % 3),
         ("Wv", (h, d, e), (h // 2, d, e), w % 4),
         ("Wo", (h, e, d), (h // 2, e, d), w % 5)],
        [],
        ["Q[h,q,e] = X[q,d] * Wq[h,d,e];",
         "K[h,k,e] = X[k,d] * Wk[h,d,e];",
         "V[h,k,e] = X[k,d] * Wv[h,d,e];",
         # the scale as a user writes it, inside the implicit SUM: tradb
         # applies it to the sums (compile/compile.c, s_terms)
         "S[h,q,k] = Q[h,q,e] * K[h,k,e] * %.9g;" % scale,
         "M[h,q] = MAX(S[h,q,k]);",
         "E[h,q,k] = exp(S[h,q,k] - M[h,q]);",
         "Z[h,q] = SUM(E[h,q,k]);",
         "P[h,q,k] = E[h,q,k] / Z[h,q];",
         "Y[h,q,e] = P[h,q,k] * V[h,k,e];",
         "O[q,m] = Y[h,q,e] * Wo[h,e,m];"],
        ["O"], attention(float("%.9g" % scale))))

    # Matrix chains: hand-split into products in the cheapest order (the
    # peers compute that order too), and as one statement.
    labels = "ijklm"

    def chain(name, title, shapes, chunks, steps):
        mats = "ABCD"[:len(shapes)]
        refs = " * ".join("%s[%s,%s]" % (m, labels[i], labels[i + 1]) for i, m in enumerate(mats))
        one = "O[i,%s] = %s;" % (labels[len(mats)], refs)
        lab = {m: (labels[i], labels[i + 1]) for i, m in enumerate(mats)}
        stmts = []
        for st in steps:
            o, rhs = st.split("=")
            a, b = rhs.split("*")
            lab[o] = (lab[a][0], lab[b][1])
            stmts.append("%s[%s,%s] = %s[%s,%s] * %s[%s,%s];" % (
                o, lab[o][0], lab[o][1], a, lab[a][0], lab[a][1], b, lab[b][0], lab[b][1]))
        out.append(Workload(
            name, title, " * ".join("%dx%d" % sh for sh in shapes),
            [(m, sh, ch, u % (i + 1)) for i, (m, sh, ch) in enumerate(zip(mats, shapes, chunks))],
            [], stmts, ["O"], program(steps), products=steps,
            variants=[Variant("1-stmt", stmts=[one])]))

    n, c = pick(3072, 3840, 768), pick(1024, 1280, 256)
    chain("chain3-square", "matrix chain, 3 square", [(n, n)] * 3, [(c, c)] * 3,
          ["T=A*B", "O=T*C"])
    chain("chain4-square", "matrix chain, 4 square", [(n, n)] * 4, [(c, c)] * 4,
          ["T=A*B", "U=T*C", "O=U*D"])
    a, b = pick((8192, 2048), (10240, 2560), (2048, 512))
    chain("chain3-mixed", "matrix chain, 3 mixed", [(a, b), (b, a), (a, b)], [(b, b)] * 3,
          ["T=B*C", "O=A*T"])
    a, b = pick((2048, 8192), (2560, 10240), (512, 2048))
    chain("chain4-mixed", "matrix chain, 4 mixed", [(a, b), (b, a)] * 2, [(a, a)] * 4,
          ["T=A*B", "U=C*D", "O=T*U"])

    # The matrix-format thesis's chain (chapter 11, size set 1: A 10K x 30K,
    # B 30K x 50K, C 50K x 1, D 1 x 50K, E and F 50K x 10K), scaled down;
    # its "all-tile" heuristic stored every matrix, inputs and
    # intermediates, in 1000 x 1000 tiles: here the inputs in square tiles
    # under the declared layout (each product's result inherits its
    # operands' tiles); and the same tiled inputs with the layout chosen.
    k, t = pick((1000, 250), (1250, 250), (250, 125))
    dims = {"A": (k, 3 * k), "B": (3 * k, 5 * k), "C": (5 * k, 1), "D": (1, 5 * k),
            "E": (5 * k, k), "F": (5 * k, k)}
    steps = ["T1=A*B", "T2=C*D", "U1=T1*E", "U2=T1*T2", "U3=U1*U2", "U4=T2*F", "O=U3*U4"]
    tiles = {m: tuple(min(t, x) for x in dims[m]) for m in "ABCDEF"}
    stmts = ["%s[i,j] = %s[i,k] * %s[k,j];" % ((st.split("=")[0],) + tuple(st.split("=")[1].split("*")))
             for st in steps]
    out.append(Workload(
        "format-dag", "matrix-format DAG (7 products)",
        "A %dx%d B %dx%d E,F %dx%d" % (dims["A"] + dims["B"] + dims["E"]),
        [(m, dims[m], None, u % (i + 1)) for i, m in enumerate("ABCDEF")],
        [], ["BEGIN;"] + stmts + ["COMMIT;"], ["O"], program(steps), products=steps,
        variants=[Variant("tiles", chunks=tiles, settings=["SET layout = declared;"]),
                  Variant("tiles-auto", chunks=tiles)]))

    # A Gram matrix, X^T X (a covariance without the centring): the
    # output is symmetric, so BLAS's syrk computes half of it (NumPy
    # calls syrk for X.T @ X); X in tradb's default chunks, and in row
    # blocks of the whole width, as a tall matrix is often loaded.
    npts, d = pick((16384, 2048), (32768, 3072), (2048, 512))
    out.append(Workload(
        "gram", "Gram matrix X^T X", "N=%d D=%d" % (npts, d),
        [("X", (npts, d), None, u % 1)], [], ["G[d,e] = X[n,d] * X[n,e];"], ["G"],
        lambda v, xp: {"G": v["X"].T @ v["X"]},
        variants=[Variant("row-blocks", chunks={"X": (npts // 8, d)})]))

    def covariance(v, xp):
        xc = v["X"] - v["X"].mean(0)
        return {"V": (xc.T @ xc) / (npts - 1)}

    # The covariance of the same X: its columns' means, then the Gram
    # matrix of X centred (tradb centres each tile inside the product's
    # task; the peers make X - mu first).
    out.append(Workload(
        "covariance", "covariance matrix", "N=%d D=%d" % (npts, d),
        [("X", (npts, d), None, u % 1)], [],
        ["mu[d] = MEAN(X[n,d]);",
         "V[d,e] = SUM((X[n,d] - mu[d]) * (X[n,e] - mu[e])) / %d;" % (npts - 1)],
        ["V"], covariance,
        variants=[Variant("row-blocks", chunks={"X": (npts // 8, d)})]))

    n, c = pick(4096, 4096, 1024), pick(1024, 1024, 256)
    mm("mm-cold", "a fresh session's first statement", n, n, n, c, c, c, cold=True)
    return out


WORKLOAD_NAMES = tuple(w.name for w in workloads("default"))


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


# ---- the Python peers (a process each) -------------------------------------

class Skip(Exception):
    """A peer that cannot run here (not installed): a note, not a failure."""


def peer_numpy(w, v, nproc, timed):
    def run():
        t0 = time.perf_counter()
        outs = w.compute(v, NumpyOps)
        return outs, time.perf_counter() - t0
    return timed(run)


def peer_torch(w, v, nproc, timed):
    """PyTorch on the CPU: the inputs as tensors sharing NumPy's memory,
    torch.set_num_threads(nproc) as NumPy's OpenBLAS uses every core (and
    torch's BLAS is that same OpenBLAS, on all cores), no autograd."""
    try:
        import torch
    except ImportError:
        raise Skip("%s cannot import torch (scripts/install-deps.sh installs python3-torch)"
                   % PYTHON)
    torch.set_num_threads(os.cpu_count())
    ops = TorchOps(torch)
    tv = {n: torch.from_numpy(a) for n, a in v.items()}

    def run():
        with torch.no_grad():
            t0 = time.perf_counter()
            outs = w.compute(tv, ops)
            t = time.perf_counter() - t0
        return outs, t

    outs, times = timed(run)
    return {k: x.numpy() for k, x in outs.items()}, times


def import_dask():
    try:
        import dask
        import dask.array  # noqa: F401
        import dask.distributed  # noqa: F401
        return dask
    except ImportError:
        raise Skip("%s cannot import dask.array and dask.distributed (scripts/install-deps.sh"
                   " installs python3-dask python3-distributed)" % PYTHON)


def dask_run(w, v, timed, persist):
    """PERSIST: a list of dask arrays -> the list persisted (computed) and
    held.  The inputs are persisted once; each run builds the graph anew
    with fresh keys (clone), so that no run can be handed results that an
    earlier one left behind, and times its persist."""
    import dask.array as da
    from dask.graph_manipulation import clone
    chunks = w.chunks()
    names = list(v)
    arrs = dict(zip(names, persist([da.from_array(v[n], chunks=chunks[n]) for n in names])))
    seed = [0]

    def run():
        seed[0] += 1
        outs = w.compute(arrs, NumpyOps)
        graph = clone(*outs.values(), omit=list(arrs.values()), seed=seed[0])
        graph = list(graph) if len(outs) > 1 else [graph]
        t0 = time.perf_counter()
        done = persist(graph)
        t = time.perf_counter() - t0
        return dict(zip(outs, done)), t

    outs, times = timed(run)
    return {k: x.compute() for k, x in outs.items()}, times


def peer_dask_threads(w, v, nproc, timed):
    dask = import_dask()
    with dask.config.set(scheduler="threads"):
        # named in the persist too: scripts/bench_alternate.py calls the
        # runs after this returns
        return dask_run(w, v, timed, lambda xs: list(dask.persist(*xs, scheduler="threads")))


def peer_dask_distributed(w, v, nproc, timed):
    """A LocalCluster of NPROC worker processes, one thread (and one BLAS
    thread) each; started and given the inputs untimed."""
    dask = import_dask()
    from dask.distributed import Client, LocalCluster, wait
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": env}):
        with LocalCluster(n_workers=nproc, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:

            def persist(xs):
                out = client.persist(xs)
                wait(out)
                return out

            return dask_run(w, v, timed, persist)


PY_PEER_FUNCS = {"numpy": peer_numpy, "torch": peer_torch,
                 "dask-threads": peer_dask_threads, "dask-distributed": peer_dask_distributed}


def peer_main(system, name, d, size, reps, nproc):
    """In a process of its own: SYSTEM 'reference' computes the f64
    reference (saved as ref-NAME.npy); a peer of PY_PEERS times REPS runs
    after one warm-up (REPS 0: its first run only, for a cold workload)
    and checks its outputs against the reference.  Writes d/peer-SYSTEM.json:
    {"samples", "checks"} or {"skipped": why}."""
    w = {x.name: x for x in workloads(size)}[name]
    v = {n: np.load("%s/in-%s.npy" % (d, n)) for n in w.inputs()}
    if system == "reference":
        ref = w.compute({n: a.astype(np.float64) for n, a in v.items()}, NumpyOps)
        for k, x in ref.items():
            np.save("%s/ref-%s.npy" % (d, k), np.asarray(x, dtype=np.float64))
        return 0

    def timed(run):
        """RUN() -> (outputs, seconds): REPS > 0: one warm-up, whose
        outputs are what is checked, then REPS timed runs (each after the
        workload's pause); REPS 0: the first run, timed."""
        outs, t = run()
        if not reps:
            return outs, [t]
        times = []
        for _ in range(reps):
            time.sleep(w.pause)
            times.append(run()[1])
        return outs, times

    try:
        outs, times = PY_PEER_FUNCS[system](w, v, nproc, timed)
    except Skip as e:
        res = {"skipped": str(e)}
    else:
        checks = {}
        for k in w.outputs:
            ok, err = check(np.load("%s/ref-%s.npy" % (d, k)), np.asarray(outs[k]))
            checks[k] = [ok, err]
        res = {"samples": times, "checks": checks}
    with open("%s/peer-%s.json" % (d, system), "w") as f:
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


def worker_threads(p):
    """Kernel threads a shell gives each of P local workers (dist/cluster.c:
    two a core among them, at least 1)."""
    return max(1, 2 * (os.cpu_count() or 1) // p)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Workers:
    """P `tradb --worker` processes on loopback, each with the kernel
    threads a shell gives each of P local workers (2 x cores / P, at
    least 1), so that tradb-workers differs from tradb embedded by the
    transport alone (extra: more worker options, such as --memory)."""

    def __init__(self, tradb, scratch, p, logname, extra=()):
        self.procs, eps = [], []
        for i in range(p):
            ep = "tcp://127.0.0.1:%d" % free_port()
            wlog = "%s/worker%d.log" % (scratch, i)
            with open(wlog, "w") as f:
                self.procs.append(subprocess.Popen(
                    [tradb, "--worker", "--listen", ep, "--data", "%s/worker%d" % (scratch, i),
                     "--threads", str(worker_threads(p))] + list(extra),
                    stdout=subprocess.DEVNULL, stderr=f))
            deadline = time.time() + 30
            while not self._listening(wlog):
                if self.procs[-1].poll() is not None or time.time() > deadline:
                    self.stop()
                    raise Failure("worker %d did not start (see %s)" % (i, wlog))
                time.sleep(0.05)
            eps.append(ep)
        self.endpoints = ",".join(eps)
        self._settle()
        log("bench: started %d tradb workers: %s" % (p, self.endpoints))

    def _settle(self):
        """Wait (at most 30 s) until the workers have faulted in the heap
        each warms while the machine is quiet: their resident memory
        unchanged for 0.5 s.  A
        system measured meanwhile would share the machine with them
        (nn-large's product, embedded, took 0.49-0.50 s a pass with two
        such workers warming beside it, 0.40-0.41 s without)."""
        def rss():
            out = []
            for p in self.procs:
                try:
                    with open("/proc/%d/status" % p.pid) as f:
                        out += [int(x.split()[1]) for x in f if x.startswith("VmRSS:")]
                except OSError:
                    out.append(-1)
            return out
        deadline, last, since = time.time() + 30, None, time.time()
        while time.time() < deadline:
            now = rss()
            if now != last:
                last, since = now, time.time()
            elif time.time() - since >= 0.5:
                return
            time.sleep(0.1)

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


class Timeout(Exception):
    pass


def setup_lines(w, tag=None):
    """Create and fill the inputs, and make the derived ones (untimed):
    one statement a line."""
    v = w.variant(tag)
    lines = list(v.settings) if v else []
    for name, shape, chunk, fill in w.tensors:
        chunk = v.chunks.get(name, chunk) if v else chunk
        lines.append("CREATE TENSOR %s[%s]%s TYPE f32;" % (
            name, ", ".join(map(str, shape)),
            " CHUNK [%s]" % ", ".join(map(str, chunk)) if chunk else ""))
        lines.append("FILL %s %s;" % (name, fill))
    return lines + [stmt for name, chunk, stmt in w.derived]


def form_stmts(w, tag):
    return dict(w.forms())[tag]


def outputs_of(stmts):
    """The tensors assignments among STMTS write (BEGIN/COMMIT write none)."""
    return [m.group(1) for m in (re.match(r"\s*(\w+)\[", st) for st in stmts) if m]


def timed_lines(w, reps, tag=None):
    """The statements REPS + 1 times under `.timer on` (the first pass is
    the warm-up)."""
    return [".timer on"] + form_stmts(w, tag) * (reps + 1) + [".timer off"]


def drop_lines(w, tag=None):
    made = set(w.inputs()) | set(outputs_of(form_stmts(w, tag)))
    return ["DROP TENSOR IF EXISTS %s;" % n for n in sorted(made)]


def tradb_session(cmd, lines, nsetup, k, npasses, limit, logname, tag):
    """Run one tradb session on LINES, a script that starts with `.timer
    on` so that every statement prints one "Run Time" line: NSETUP
    statements, then NPASSES passes of K statements, then the rest.  Each
    pass must end within LIMIT seconds: one that does not is interrupted
    with SIGINT (as Ctrl-C: the statement is cancelled on the workers and
    the shell stops) and Timeout is raised.  Returns the passes' statement
    times, a list of NPASSES lists of K seconds."""
    with open(logname, "a") as errf:
        errf.write("$ %s  < %s script (%d lines)\n" % (" ".join(cmd), tag, len(lines)))
        errf.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=errf, text=True)
    lines_q = queue.Queue()

    def feed():
        """The lines; a number among them is a pause, in seconds."""
        try:
            for ln in lines:
                if isinstance(ln, float):
                    proc.stdin.flush()
                    time.sleep(ln)
                else:
                    proc.stdin.write(ln + "\n")
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def read():
        for line in proc.stdout:
            lines_q.put(line)
        lines_q.put(None)

    threading.Thread(target=feed, daemon=True).start()
    threading.Thread(target=read, daemon=True).start()
    times, out, timed_out = [], [], False
    deadline = time.time() + 1800  # the set-up
    while True:
        try:
            line = lines_q.get(timeout=max(0.0, deadline - time.time()))
        except queue.Empty:
            timed_out = True
            log("  %s: a pass ran past %g s: interrupting it (SIGINT)" % (tag, limit))
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            break
        if line is None:
            break
        out.append(line)
        m = re.match(r"Run Time: real ([0-9.]+)", line)
        if not m:
            continue
        times.append(float(m.group(1)))
        n = len(times) - nsetup  # statements of the passes done
        if 0 <= n < k * npasses and n % k == 0:
            deadline = time.time() + limit
        elif n == k * npasses:
            deadline = time.time() + 1800  # saving and dropping
    rc = proc.wait()
    with open(logname, "a") as f:
        f.write("".join(out))
    if timed_out:
        raise Timeout("%s: a pass ran past %g s" % (tag, limit))
    if rc != 0:
        raise Failure("%s exited with status %d (see %s)" % (cmd[0], rc, logname))
    t = times[nsetup:nsetup + k * npasses]
    if len(t) != k * npasses:
        raise Failure("%s: expected %d 'Run Time' lines for the passes, got %d"
                      % (tag, k * npasses, len(t)))
    return [t[i * k:(i + 1) * k] for i in range(npasses)]


def run_tradb(w, tag, d, reps, system, cmd, logname, limit):
    """tradb sessions on form TAG of W: set-up, the passes, SAVE the
    outputs, DROP everything.  One session of REPS + 1 passes, the first
    dropped; or, for a cold workload, REPS fresh sessions of one pass
    each.  Returns the timed passes' statement times (REPS lists of
    statement seconds); raises Timeout."""
    stmts = form_stmts(w, tag)
    fname = system.replace(":", "_")
    passes = []
    for r in range(reps if w.cold else 1):
        setup = setup_lines(w, tag)
        npasses = 1 if w.cold else reps + 1
        typed = [x for st in stmts for x in ([w.pause, st] if w.pause else [st])]
        lines = [".timer on"] + setup + typed * npasses
        if r == 0:
            lines += ["SAVE %s TO '%s/%s-%s.npy';" % (n, d, fname, n) for n in w.outputs]
        lines += [".mode csv", "SHOW TENSORS;", ".mode table"] if r == 0 else []
        lines += drop_lines(w, tag) + [".timer off"]
        ps = tradb_session(cmd + ["--bail"], lines, len(setup), len(stmts), npasses, limit,
                           logname, system)
        passes += ps if w.cold else ps[1:]
    return passes


def tensor_chunks(logname, system, names):
    """The chunk shapes of NAMES as SHOW TENSORS printed them (csv) in
    SYSTEM's last session, from the log."""
    with open(logname) as f:
        text = f.read()
    text = text[text.rfind("< %s script" % system):]
    got = {}
    for m in re.finditer(r"^(\w+),([0-9 x]+),([0-9 x]+),", text, re.M):
        if m.group(1) in names and m.group(1) not in got:
            got[m.group(1)] = m.group(3).replace(" ", "")
    return got


def parse_times(out, word, n, what):
    t = [float(x) for x in re.findall(r"^%s ([0-9.]+)" % word, out, re.M)]
    if len(t) != n:
        raise Failure("%s: expected %d timings, got %d" % (what, n, len(t)))
    return t


def median(xs):
    return statistics.median(xs) if xs else None


def build_peers(outdir, logname):
    """Build the C peers; returns {"gemm": path, "psgemm": path} for those
    that built, and {"skipped": {system: why}} for the others."""
    tools, skipped = {}, {}
    gemm = "%s/bench_gemm" % outdir
    try:
        if not shutil.which("pkg-config") or not shutil.which("gcc"):
            raise Failure("gcc or pkg-config not found")
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "openblas"],
                               stdout=subprocess.PIPE, text=True, check=True).stdout.split()
        run(["gcc", "-O2", "-o", gemm, "%s/bench_gemm.c" % HERE] + flags, logname)
        tools["gemm"] = gemm
    except (Failure, subprocess.CalledProcessError) as e:
        skipped["openblas"] = "cannot build scripts/bench_gemm.c (%s; scripts/install-deps.sh" \
            " installs libopenblas-dev pkg-config)" % e
    psgemm = "%s/bench_psgemm" % outdir
    try:
        for tool in ("mpicc", "mpirun"):
            if not shutil.which(tool):
                raise Failure("%s not found" % tool)
        run(["mpicc", "-O2", "-o", psgemm, "%s/bench_psgemm.c" % HERE, "-lscalapack-openmpi"],
            logname)
        tools["psgemm"] = psgemm
    except Failure as e:
        skipped["scalapack"] = "cannot build scripts/bench_psgemm.c (%s; scripts/install-deps.sh" \
            " installs openmpi-bin libopenmpi-dev libscalapack-openmpi-dev)" % e
    for s, why in skipped.items():
        log("bench: %s skipped: %s" % (s, why))
    tools["skipped"] = skipped
    return tools


def mpi_env():
    """mpirun's environment: this one (same_blas_kernels's setting in it),
    and leave to run as root and to oversubscribe the cores."""
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
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


def same_blas_kernels(tradb):
    """Run every system on the OpenBLAS kernels tradb runs on this CPU:
    OpenBLAS falls back to generic ones on a CPU newer than it knows, and
    tradb then names the right ones (`tradb --version`); the peers load
    the same library and would keep the generic ones.  A user's own
    OPENBLAS_CORETYPE stands.  Returns the kernels."""
    if not os.environ.get("OPENBLAS_CORETYPE"):
        ver = subprocess.run([tradb, "--version"], stdout=subprocess.PIPE, text=True).stdout
        m = re.search(r"^OpenBLAS kernels: (\S+)$", ver, re.M)
        if m:
            os.environ["OPENBLAS_CORETYPE"] = m.group(1)
    return os.environ.get("OPENBLAS_CORETYPE", "OpenBLAS's own choice")


def report(results, args, p, started, load0, wall, tradb):
    """The markdown results: a header, the table, the losses and the
    statements' times."""
    ver = subprocess.run([tradb, "--version"], stdout=subprocess.PIPE,
                         text=True).stdout.strip().replace("\n", " ")
    skipped = {}
    for r in results:
        for s, why in r["skipped"].items():
            skipped.setdefault(s, why)
    lines = [
        "- date: %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "- machine: %s" % machine(),
        "- tradb: %s; tradb and tradb-workers: %d workers x %d kernel threads; ScaLAPACK: %d MPI"
        " ranks; dask-distributed: %d worker processes x 1 thread; numpy, torch"
        " (torch.set_num_threads(%d); its BLAS, OpenBLAS as numpy's, on all cores) and"
        " dask-threads: one process on all cores" % (
            ver, p, worker_threads(p), p, p, os.cpu_count()),
        "- OpenBLAS kernels, every system: %s (OPENBLAS_CORETYPE)" % same_blas_kernels(tradb),
        "- command: `%s`" % args.cmdline,
        "- load average (1/5/15 min) at start: %s; at end: %s (a shared machine: other"
        " work slows every system, unevenly)" % (load0, loadavg()),
        "- %d timed runs per system in %d round(s), every system taking its turn in each, %s;"
        " the medians are in seconds; wall time of the whole suite: %.0f s" % (
            args.reps, min(args.rounds, args.reps),
            "each run a fresh session (tradb) or process (peers) timing its first pass, no"
            " warm-up (--cold)" if args.cold else "a round's runs after one untimed warm-up" +
            "".join(" (%s: %d fresh processes, each timing its first run)" % (r["w"].name, args.reps)
                    for r in results if r["w"].cold), wall),
        "- every result was checked against NumPy in f64 (max abs error <= %g x max |ref|"
        " per output) before its time was kept; \"timeout\": a pass ran past %g s and was"
        " interrupted" % (TOL, args.time_limit),
    ]
    for s in PEERS:
        if s in skipped:
            lines.append("- not run: %s: %s" % (s, skipped[s]))
    lines += [
        "",
        "| workload | size | system | median s | runs | tradb / system | tradb-workers / system |",
        "|---|---|---|---|---|---|---|",
    ]
    losses = []
    for r in results:
        w, samples = r["w"], r["samples"]
        t0 = median(samples.get("tradb"))
        t1 = median(samples.get("tradb-workers"))
        for s in w.systems():
            if s in r["timeouts"]:
                lines.append("| %s | %s | %s | timeout (> %g s) | 0 | - | - |" % (
                    w.name, w.size, s, r["timeouts"][s]))
                continue
            if s not in samples:
                continue
            m = median(samples[s])
            lines.append("| %s | %s | %s | %.3f | %d | %s | %s |" % (
                w.name, w.size, s, m, len(samples[s]), fmt_ratio(t0, m), fmt_ratio(t1, m)))
            if s in PEERS and t0 and t0 > m:
                losses.append((t0 / m, w.name, s))
    lines.append("")
    if losses:
        losses.sort(reverse=True)
        lines.append("tradb (embedded) is slower than: " + "; ".join(
            "%s on %s (x%.2f)" % (s, n, x) for x, n, s in losses) + ".")
    else:
        lines.append("tradb (embedded) is at least as fast as every peer on every workload.")
    chunked = [r for r in results if any(v.chunks for v in r["w"].variants)]
    if chunked:
        lines += ["", "Chunk shapes as stored (from SHOW TENSORS at the end of the embedded"
                  " session; the assignments' outputs have the chunks the layout chose, or"
                  " under SET layout = declared their inputs' chunk sizes):",
                  ""]
        for r in chunked:
            for tag, _ in r["w"].forms():
                c = r["chunks"].get(system_name("tradb", tag), {})
                lines.append("- %s, %s: %s" % (r["w"].name, system_name("tradb", tag), ", ".join(
                    "%s %s" % kv for kv in c.items()) or "-"))
    lines += ["", "Where tradb's time goes, statement by statement (medians, seconds):", "",
              "| workload | statement | tradb | tradb-workers |", "|---|---|---|---|"]
    for r in results:
        w = r["w"]
        for tag, stmts in w.forms():
            for i, st in enumerate(stmts):
                cells = []
                for b in TRADB:
                    s = system_name(b, tag)
                    cells.append("%.3f" % r["stmts"][s][i] if s in r["stmts"] else
                                 "timeout" if s in r["timeouts"] else "-")
                lines.append("| %s | `%s` | %s | %s |" % (
                    "%s (%s)" % (w.name, tag) if tag else w.name, st, cells[0], cells[1]))
    return "\n".join(lines) + "\n"


def chart(results, outdir, logname):
    """ratios.dat and, with gnuplot, ratios.svg: tradb / peer per workload."""
    peers = [s for s in PEERS if any(s in r["samples"] for r in results)]
    rows = [r for r in results if r["samples"].get("tradb")]
    dat = "%s/ratios.dat" % outdir
    cols = [[] for _ in peers]  # each peer's ratios
    with open(dat, "w") as f:
        f.write("workload " + " ".join(peers) + "\n")
        for r in rows:
            t0 = median(r["samples"]["tradb"])
            for j, s in enumerate(peers):
                if s in r["samples"]:
                    cols[j].append(t0 / median(r["samples"][s]))
            f.write(r["w"].name + " " + " ".join(
                "%.4f" % (t0 / median(r["samples"][s])) if s in r["samples"] else "-"
                for s in peers) + "\n")
    if not shutil.which("gnuplot"):
        log("bench: gnuplot not found (install gnuplot-nox): no chart")
        return None
    if not rows or not peers:
        return None
    svg = "%s/ratios.svg" % outdir
    n = len(peers)
    # The value labels above the bars at or over 1 and below those under 1;
    # a label plot with no point crashes gnuplot 5.4, also one iteration of
    # a `for` with none, so each peer's are drawn only where some bar of
    # that peer needs them.
    labels = ""
    for j, col in enumerate(cols):
        c = j + 2
        if any(v >= 1 for v in col):
            labels += ("     '' using (x(%d)):(up(column(%d))):(sprintf('%%.2f', column(%d))) \\\n"
                       "       with labels rotate by 90 left offset 0,0.3 font ',7' notitle, \\\n" % (c, c, c))
        if any(v < 1 for v in col):
            labels += ("     '' using (x(%d)):(down(column(%d))):(sprintf('%%.2f', column(%d))) \\\n"
                       "       with labels rotate by 90 right offset 0,-0.3 font ',7' notitle, \\\n" % (c, c, c))
    plot = """
set terminal svg size %d,520 dynamic font 'sans,12' background rgb 'white'
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
set xtics nomirror rotate by -30
set style fill solid 0.85 border -1
set arrow from graph 0, first 1 to graph 1, first 1 nohead lw 2 lc rgb 'black' front
w = 0.8 / %d
x(i) = column(0) - 0.4 + (i - 1.5) * w
up(v) = v >= 1 ? v : NaN
down(v) = v < 1 ? v : NaN
plot for [i=2:%d] '%s' using (x(i)):(column(i)):(x(i) - w / 2):(x(i) + w / 2):(1):(column(i)) \\
       with boxxyerror, \\
%s     '' using 0:(NaN):xtic(1) notitle
""" % (max(1000, 90 * len(rows)), svg, os.cpu_count(), len(rows) - 1, n, n + 1, dat, labels)
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
    reference.  Returns a dict: samples (system -> seconds per run), stmts
    (tradb system -> median seconds per statement), timeouts (system ->
    the limit it ran past), skipped (peer -> why), chunks (tradb system ->
    tensor -> chunk shape as stored), failed (messages), passes (tradb
    system -> the statement times of every timed pass)."""
    r = {"w": w, "samples": {}, "stmts": {}, "timeouts": {}, "skipped": {}, "chunks": {},
         "failed": [], "passes": {}}
    samples, checks = r["samples"], {}
    peer_cmd = [PYTHON, os.path.abspath(__file__), "--peer"]
    # The timed runs in --rounds rounds, every system taking its turn in
    # each: a burst of load on this shared machine (10 s of it made every
    # pass of one tradb session 1.45 s against 0.92-0.99 s in the
    # sessions around it) then falls on one round of each system, not on
    # all the runs of the one measured during it.
    rounds, done = min(args.rounds, args.reps), 0
    save_inputs(w, d, args, tradb, logname, peer_cmd)
    for rnd in range(rounds):
        reps = args.reps * (rnd + 1) // rounds - done
        done += reps
        bench_round(w, d, args, tradb, workers, tools, logname, r, checks, rnd, reps, peer_cmd)
    if rounds > 1:
        for s in w.systems():
            if s in samples:
                log("  %s, all rounds: %s" % (s, " ".join("%.4fs" % t for t in samples[s])))
    ref = {k: np.load("%s/ref-%s.npy" % (d, k)) for k in w.outputs}
    for s in w.systems():
        if s in samples and s not in checks:
            checks[s] = {}
            for k in w.outputs:
                ok, err = check(ref[k], np.load("%s/%s-%s.npy" % (d, s.replace(":", "_"), k)))
                checks[s][k] = [ok, err]
    for s in w.systems():
        if s not in checks:
            continue
        bad = {k: e for k, (ok, e) in checks[s].items() if not ok}
        if bad:
            r["failed"].append("%s on %s: %s" % (s, w.name, bad))
            log("bench: WRONG: %s on %s differs from numpy: %s" % (s, w.name, bad))
            del samples[s]
        else:
            log("  check %s: ok (max rel error %s)" % (s, ", ".join(
                "%s %.1e" % (k, e) for k, (ok, e) in checks[s].items())))
    return r


def save_inputs(w, d, args, tradb, logname, peer_cmd):
    """The inputs of W as tradb makes them, saved in D for the peers by a
    session of their own (untimed), and the f64 reference computed from
    them; then the disks are synced, so that no timed run of any system
    shares the machine with this write-back."""
    lines = (setup_lines(w) + ["SAVE %s TO '%s/in-%s.npy';" % (n, d, n) for n in w.inputs()]
             + drop_lines(w))
    run([tradb, "--bail"], logname, input="\n".join(lines) + "\n")
    log("  reference (numpy, f64) ...")
    run(peer_cmd + ["reference", w.name, d, args.size, "0", str(args.nworkers)], logname)
    os.sync()


def round_order(units, rnd):
    """The order the systems of round RND take their turns in: shuffled,
    the round its seed.  In a fixed order each system always ran right
    after the same one, so whatever that one left behind (the write-back
    of the outputs it saved, its freed memory), and any stretch of load
    that came with the same point of every round, fell on the same system
    each time: in one run a fresh tradb session's first product measured
    1.06-1.11 s in the rounds where it followed Dask distributed and
    0.92-0.96 s in the first round; shuffled, a later run saw it at 0.83
    and 0.91 s right after Dask distributed."""
    order = list(units)
    random.Random(rnd).shuffle(order)
    return order


def bench_round(w, d, args, tradb, workers, tools, logname, r, checks, rnd, reps, peer_cmd):
    """One round of bench_workload: REPS timed runs of W on every system
    (a cold workload: REPS fresh processes each), added to r's samples,
    statement times, timeouts, skips and chunks and to CHECKS (peer ->
    output -> [ok, error]), the systems in round_order and the disks
    synced after each (what one saved is not written back while the next
    is timed).  A system that timed out or was skipped in an earlier
    round is not run again."""
    samples = r["samples"]
    p = args.nworkers
    runs = reps if w.cold else 1

    def tradb_unit(tag, base, cmd):
        s = system_name(base, tag)
        if s in r["timeouts"]:
            return
        log("  %s ..." % s)
        try:
            ps = run_tradb(w, tag, d, reps, s, cmd, logname, args.time_limit)
        except Timeout:
            r["timeouts"][s] = args.time_limit
            samples.pop(s, None)
            r["stmts"].pop(s, None)
            return
        samples.setdefault(s, []).extend(sum(x) for x in ps)
        r["passes"].setdefault(s, []).extend(ps)
        r["stmts"][s] = [median(list(x)) for x in zip(*r["passes"][s])]
        r["chunks"][s] = tensor_chunks(logname, s, w.inputs() + outputs_of(form_stmts(w, tag)))
        log("  %s: %s" % (s, " ".join("%.4fs" % t for t in samples[s][-len(ps):])))

    def c_unit(s, tool):
        if tool not in tools:
            r["skipped"][s] = tools["skipped"][s]
            return
        prog = ";".join(w.products)
        made = {st.split("=")[0] for st in w.products}
        ins = sorted({x for st in w.products for x in re.split(r"[=*]", st)} - made)
        files = ["%s=%s/in-%s.npy" % (x, d, x) for x in ins]
        n = 0 if w.cold else reps
        log("  %s%s ..." % (s, " (mpirun -np %d)" % p if s == "scalapack" else ""))
        outf = "%s/%s-%s.npy" % (d, s, w.outputs[0])
        t = []
        for _ in range(runs):
            if s == "openblas":
                out = run([tools["gemm"], str(n), prog, outf] + files, logname)
            else:
                core = ["-x", "OPENBLAS_CORETYPE"] if "OPENBLAS_CORETYPE" in os.environ else []
                out = run(["mpirun", "-np", str(p), "-x", "OPENBLAS_NUM_THREADS=1"] + core +
                          [tools["psgemm"], str(n), "256", prog, outf] + files,
                          logname, env=mpi_env())
            t += parse_times(out, tool, n or 1, "bench_" + tool)
        samples.setdefault(s, []).extend(t)

    def py_unit(s):
        if s in r["skipped"]:
            return
        log("  %s ..." % s)
        t, ch = [], checks.setdefault(s, {})
        for _ in range(runs):
            run(peer_cmd + [s, w.name, d, args.size, "0" if w.cold else str(reps), str(p)],
                logname)
            with open("%s/peer-%s.json" % (d, s)) as f:
                res = json.load(f)
            if "skipped" in res:
                r["skipped"][s] = res["skipped"]
                log("  %s skipped: %s" % (s, res["skipped"]))
                checks.pop(s, None)
                samples.pop(s, None)
                return
            t += res["samples"]
            for k, (ok, err) in res["checks"].items():
                if k not in ch or not ok:
                    ch[k] = [ok, err]
        samples.setdefault(s, []).extend(t)
        log("  %s: %s" % (s, " ".join("%.4fs" % x for x in t)))

    units = [(tradb_unit, (tag, base, cmd)) for tag, _ in w.forms()
             for base, cmd in (("tradb", [tradb]),
                               ("tradb-workers", [tradb, "--workers", workers.endpoints]))]
    if w.products:
        units += [(c_unit, ("openblas", "gemm")), (c_unit, ("scalapack", "psgemm"))]
    units += [(py_unit, (s,)) for s in PY_PEERS]
    for f, a in round_order(units, rnd):
        f(*a)
        os.sync()


def pass_times(w, out, reps, tag):
    """From tradb's output, the statement times of passes 1..REPS (pass 0
    is the warm-up): a list of REPS lists of len(w.stmts) seconds."""
    t = [float(x) for x in re.findall(r"^Run Time: real ([0-9.]+)", out, re.M)]
    k = len(w.stmts)
    if len(t) != (reps + 1) * k:
        raise Failure("%s: expected %d 'Run Time' lines, got %d"
                      % (tag, (reps + 1) * k, len(t)))
    return [t[i * k:(i + 1) * k] for i in range(1, reps + 1)]


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
    ap.add_argument("--size", choices=SIZES, default="default",
                    help="default; large (about twice the work each); small (a quick check"
                    " of the harness, not a benchmark)")
    ap.add_argument("--reps", type=int, default=3, help="timed runs per system (default 3)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds the timed runs are split into, every system taking its turn in"
                    " each, so that a burst of load falls on every system alike (default 3, at"
                    " most --reps; 1: each system's runs back to back)")
    ap.add_argument("--only", default="", help="comma-separated workloads (default: all)")
    ap.add_argument("--nworkers", type=int, default=os.cpu_count(),
                    help="tradb --workers processes, ScaLAPACK ranks and dask-distributed"
                    " workers (default: nproc)")
    ap.add_argument("--time-limit", type=float, default=30, metavar="S",
                    help="seconds one pass of a workload may take on tradb before it is"
                    " interrupted and reported as a timeout (default 30)")
    ap.add_argument("--out", default="bench-out", help="output directory (default bench-out)")
    ap.add_argument("--write-md", metavar="FILE", help="put the results into FILE")
    ap.add_argument("--synchronous", default="", metavar="V1,V2",
                    help="also run tradb under these values of SET synchronous, as the"
                    " systems tradb:V and tradb-workers:V (plain tradb runs under the"
                    " default, normal)")
    ap.add_argument("--cold", action="store_true",
                    help="time every workload as mm-cold is timed: each run a fresh tradb"
                    " session (its set-up, then the first pass) or a fresh peer process"
                    " (its inputs loaded, then the first run), no warm-up")
    ap.add_argument("--profile", action="store_true",
                    help="instead of comparing: profile tradb (--workers) on each workload"
                    " with perf, into DIR/profile-WORKLOAD.txt")
    args = ap.parse_args(argv)
    if args.cold and args.profile:
        ap.error("--cold and --profile: --profile runs warmed-up passes only")
    if args.reps < 1 or args.rounds < 1 or args.nworkers < 1 or args.time_limit <= 0:
        ap.error("--reps, --rounds, --nworkers and --time-limit must be positive")
    names = [x for x in args.only.split(",") if x]
    for x in names:
        if x not in WORKLOAD_NAMES:
            ap.error("unknown workload '%s' (known: %s)" % (x, ", ".join(WORKLOAD_NAMES)))
    args.names = names or list(WORKLOAD_NAMES)
    args.sync = [x for x in args.synchronous.split(",") if x]
    for x in args.sync:
        if x not in ("full", "normal"):
            ap.error("--synchronous: '%s' is not full or normal" % x)
    args.cmdline = " ".join(["scripts/bench.sh"] + argv)
    return args


def main(argv):
    global LOG
    if argv[:1] == ["--peer"]:
        if len(argv) != 7 or argv[1] not in ("reference",) + PY_PEERS:
            sys.stderr.write("usage: bench.py --peer reference|%s WORKLOAD DIR SIZE REPS P\n"
                             % "|".join(PY_PEERS))
            return 2
        return peer_main(argv[1], argv[2], argv[3], argv[4], int(argv[5]), int(argv[6]))
    args = parse_args(argv)
    started, load0 = time.time(), loadavg()
    tradb = os.path.abspath(os.environ.get("TRADB", "./tradb"))
    if not os.access(tradb, os.X_OK):
        log("bench: no tradb binary at %s (set TRADB or run make)" % tradb)
        return 1
    same_blas_kernels(tradb)
    if args.profile and not shutil.which("perf"):
        log("bench: perf not found (scripts/install-deps.sh installs linux-perf)")
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
    log("bench: %s, %d workloads, %d reps, %d workers, time limit %g s per pass; log %s"
        % (args.size, len(args.names), args.reps, p, args.time_limit, logname))
    tools = build_peers(outdir, logname)
    scratch = tempfile.mkdtemp(prefix="tradb-bench.", dir=os.environ.get("TMPDIR", "/tmp"))
    results, failed = [], []
    workers = None
    try:
        workers = Workers(tradb, scratch, p, logname)
        wls = [w for w in workloads(args.size) if w.name in args.names]
        for w in wls:  # the durability settings side by side
            w.variants += [Variant(v, settings=["SET synchronous = %s;" % v]) for v in args.sync]
            w.cold = w.cold or args.cold
        for i, w in enumerate(wls):
            t_w = time.time()
            d = "%s/%s" % (scratch, w.name)
            os.makedirs(d)
            if args.profile:
                if not w.cold:
                    profile_workload(w, d, args, tradb, workers, outdir, logname)
                continue
            log("bench: [%d/%d] %s (%s): %s" % (i + 1, len(wls), w.name, w.title, w.size))
            r = bench_workload(w, d, args, tradb, workers, tools, logname)
            failed += r["failed"]
            results.append(r)
            shutil.rmtree(d, ignore_errors=True)
            log("bench: %s done in %.0f s; %s" % (w.name, time.time() - t_w, ", ".join(
                "%s %.3f" % (s, median(r["samples"][s])) if s in r["samples"] else
                "%s timeout" % s for s in w.systems()
                if s in r["samples"] or s in r["timeouts"])))
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
        json.dump({r["w"].name: {
            "samples": r["samples"], "timeouts": r["timeouts"], "skipped": r["skipped"],
            "chunks": r["chunks"],
            "statements": {system_name("", tag) or "primary": dict(zip(stmts, zip(*(
                r["stmts"].get(system_name(b, tag), [None] * len(stmts)) for b in TRADB))))
                for tag, stmts in r["w"].forms()}}
            for r in results}, f, indent=1)
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
