#!/usr/bin/python3
"""Expressions against NumPy: random statements over random tensors.

Each seed makes one tradb session (1 to 4 workers, local ones or, every
third seed, `tradb --worker`s on loopback TCP; `layout` auto or
declared by turns, `replication` 1 to 3, `synchronous` normal or full) over nine random tensors of rank 0 to 3 on labels of
random sizes (1 included), f32 or f64 (a fifth), LOADed in random chunks,
and runs statements drawn at random, each SAVEd and compared with NumPy in
f64:

  - products of 2 to 8 references with the labels not on the left summed
    implicitly, scaled, negated or divided by a number, a reference's label
    sometimes renamed to another of its size (a diagonal, or a Gram
    product's second factor);
  - SUM, MAX, MIN or MEAN of an elementwise expression (+ - * /, unary
    functions, sqrt and log kept in their domain, small powers `^`,
    comparisons, `step` and `where` over stored values, numbers), then a function
    or a scale;
  - an aggregation inside an elementwise expression (`X[i,j] - MAX(Y[i,k])`,
    softmax's `exp(...)`);
  - elementwise expressions with broadcasting;
  - a Gram product X^T X or a covariance around MEAN of one tensor;
  - ARGMAX or ARGMIN of a tensor along one label;
  - a slice `R = X[1:-1, 2]` (ranges, indices, negative ones);
  - numbers alone (`s[] = -1.25;`);

one by one or in blocks (BEGIN .. COMMIT) of 2 to 4, a statement reading
the outputs of earlier ones (of its block too) as well as the tensors, and
at times replacing a tensor there is (a LOADed one or an output, the one
it reads included) with one of another shape and type.

Every statement is valid, so any error fails the seed (a warning is
printed, not counted).  A statement that
reads an f64 tensor computes in f64 and must match to f64 precision.  What
it found: a product's factor summed on its own first made an f32
temporary inside an f64 statement (results off in the 7th digit), a
scalar of numbers alone had no runnable plan, and a plan of more than
5000 chunk tasks over workers of a few MiB ran unscheduled, beyond their
memory (seed 4032 with EXPRS_MEMORY=1: m-TOPO now places such a graph).

Usage: exprs.py TRADB WORKDIR [FIRST [LAST] [STATEMENTS]]   seeds FIRST..LAST
(default 1..6, 40 statements each: what make check runs).  EXPRS_SIZES
(below) draws other label sizes; EXPRS_MEMORY=1 gives half the TCP seeds'
workers 1 to 16 MiB of --memory and a random scheduler; EXPRS_CHAINS=1
makes every block 3 to 6 unscaled products of 2 to 4 references reading
the block's own outputs, a quarter of them under tanh(SUM(..)).  WORKDIR/seedN
keeps each seed's script.sql, the shell's output and the results.
"""
import os
import shutil
import subprocess
import sys

import numpy as np

LABELS = "abcdefg"
TWIN = {"a": "b", "b": "a", "d": "e", "e": "d"}  # labels of equal size
UNARY = {"exp": np.exp, "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0),
         "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "abs": np.abs, "neg": np.negative}
# functions written around their argument to keep it in their domain
GUARDED = {"sqrt(abs(%s))": lambda x: np.sqrt(np.abs(x)),
           "log(abs(%s) + 1)": lambda x: np.log(np.abs(x) + 1)}
COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
           "==": np.equal, "!=": np.not_equal}
REDUCE = {"SUM": np.sum, "MAX": np.max, "MIN": np.min, "MEAN": np.mean}
MAX_ELEMENTS = 2e6  # an expression's broadcast size, for NumPy's sake
# label sizes; EXPRS_SIZES=1,64,130,257 tries larger ones (chunks cut in
# pieces, gemm panels), not in make check: GBs of memory, minutes a seed
SIZES = [int(x) for x in os.environ.get("EXPRS_SIZES", "1,2,3,5,7,8,13,16,33").split(",")]
# EXPRS_CHAINS=1: blocks of 3 to 6 products alone, unscaled, reading each
# other's outputs (a block's products read through the products that made
# them: compile/inline.c), not in make check
CHAINS = bool(os.environ.get("EXPRS_CHAINS"))


class TooBig(Exception):
    pass


class Seed:
    def __init__(self, seed, nstmts):
        self.rng = np.random.default_rng(seed)
        self.size = {c: int(self.rng.choice(SIZES)) for c in LABELS}
        self.size["b"], self.size["e"] = self.size["a"], self.size["d"]
        self.tensors = {}  # name -> (labels, array)
        self.inexact = set()  # outputs known only to f32's precision
        self.reads_inexact = False  # the statement being made reads one
        self.workers = 1 + seed % 4
        self.script = ["SET layout = %s;" % ("auto" if seed % 2 else "declared"),
                       "SET replication = %d;" % min(self.workers, self.rng.choice([1, 2, 2, 3])),
                       "SET synchronous = %s;" % self.rng.choice(["normal", "normal", "full"])]
        self.cases = []  # (name, statement, reference, f64, file SAVEd to, largest value on the way)
        self.loaded = set()  # tensors still holding the values LOADed
        # TCP workers (every third seed) with little memory at times, so that
        # the schedulers place the tasks in waves
        self.worker_args = []
        if os.environ.get("EXPRS_MEMORY") and self.rng.random() < 0.5:
            self.worker_args = ["--memory", str(self.rng.choice(["1M", "4M", "16M"]))]
            self.script.append("SET scheduler = %s;" % self.rng.choice(["msct", "metf", "mtopo"]))
        for t in range(9):
            self.tensor("T%d" % t)
        s = 0
        while s < nstmts:  # one by one, or a block of 2 to 4 reading each other
            n = 1 if self.rng.random() < 0.7 else int(self.rng.integers(2, 5))
            if CHAINS:
                n = int(self.rng.integers(3, 7))
            names = ["R%d" % i for i in range(s, min(s + n, nstmts))]
            self.in_block = len(names) > 1
            if self.in_block:
                self.script.append("BEGIN;")
            self.block_written = set()
            first = len(self.cases)
            for name in names:
                self.statement(name)
            if len(names) > 1:
                self.script.append("COMMIT;")
            self.script += ["SAVE %s TO '%s';" % (c[0], c[4]) for c in self.cases[first:]]
            s += len(names)

    def tensor(self, name):
        rng = self.rng
        rank = int(rng.choice([0, 1, 2, 2, 2, 3, 3]))
        labs = "".join(rng.choice(list(LABELS), size=rank, replace=False)) if rank else ""
        shape = [self.size[c] for c in labs]
        a = rng.standard_normal(shape).astype(np.float64 if rng.random() < 0.2 else np.float32)
        np.save(name + ".npy", a)
        self.tensors[name] = (labs, a)
        self.loaded.add(name)
        chunk = ""
        if rank and rng.random() < 0.8:
            chunk = " CHUNK [%s]" % ", ".join(str(int(rng.integers(1, s + 1))) for s in shape)
        self.script.append("LOAD %s FROM '%s.npy'%s;" % (name, name, chunk))

    # A value: (text, (array over labels, labels), reads f64)
    def ref(self, stored=False):
        names = [n for n in self.tensors if n in self.loaded or not stored]
        mine = [n for n in names if n in getattr(self, "block_written", ())]
        if CHAINS and mine and self.rng.random() < 0.6:  # the block's own outputs
            names = mine
        name = str(self.rng.choice(names))
        labs, a = self.tensors[name]
        ls = list(labs)
        if ls and self.rng.random() < 0.3:
            i = int(self.rng.integers(len(ls)))
            ls[i] = TWIN.get(ls[i], ls[i])
        uniq = "".join(dict.fromkeys(ls))
        val = a.astype(np.float64)
        if len(uniq) != len(ls):  # a label twice: the diagonal
            val = np.einsum("".join(ls) + "->" + uniq, val)
        self.reads_inexact |= name in self.inexact
        return "%s[%s]" % (name, ",".join(ls)), (val, uniq), a.dtype == np.float64

    def aligned(self, v, out):
        a, labs = v
        if a.ndim:
            a = np.transpose(a, [labs.index(c) for c in out if c in labs])
        return np.reshape(a, [self.size[c] if c in labs else 1 for c in out])

    def binop(self, x, y, op):
        out = "".join(dict.fromkeys(x[1][1] + y[1][1]))
        if np.prod([self.size[c] for c in out]) > MAX_ELEMENTS:
            raise TooBig()
        a, b = self.aligned(x[1], out), self.aligned(y[1], out)
        if op == "/":  # a divisor kept away from 0
            return ("(%s / (abs(%s) + 1))" % (x[0], y[0]), (a / (np.abs(b) + 1), out), x[2] or y[2])
        if op in COMPARE:  # 1 or 0, exact only between values read as stored
            return ("(%s %s %s)" % (x[0], op, y[0]), (COMPARE[op](a, b).astype(np.float64), out),
                    x[2] or y[2])
        f = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
        return "(%s %s %s)" % (x[0], op, y[0]), (f(a, b), out), x[2] or y[2]

    def leaf(self, stored=False):
        """A number or a reference (with STORED, to a tensor LOADed, whose
        values tradb holds exactly as NumPy does: comparisons of computed
        values could fall either way)."""
        if self.rng.random() < 0.15:
            c = round(float(self.rng.uniform(-2, 2)), 3)
            return repr(c), (np.array(c), ""), False
        return self.ref(stored)

    def elem(self, depth):
        """An elementwise expression of DEPTH at most; TooBig when it, or
        a step on the way, is past what f32 holds well (then NaN or inf
        in tradb's f32 where NumPy's f64 is finite)."""
        e = self.elem_any(depth)
        if e[1][0].size and not np.max(np.abs(e[1][0])) < 1e30:
            raise TooBig()
        self.seen(e[1][0])
        return e

    def seen(self, v):
        """Note a value the statement computes on the way: its rounding
        errors scale with the largest of them (f32's 1.2e9 - (1.2e9 + 1)
        is 0 or -2), so the tolerance does."""
        if np.size(v):
            self.peak = max(self.peak, float(np.nanmax(np.abs(v))))

    def elem_any(self, depth):
        rng = self.rng
        if depth <= 0 or rng.random() < 0.3:
            return self.leaf()
        k = rng.random()
        if k < 0.2:  # continuous: an f32 value near a jump could fall either side
            fn = str(rng.choice(list(UNARY)))
            t, v, f = self.elem(depth - 1)
            return "%s(%s)" % (fn, t), (UNARY[fn](v[0]), v[1]), f
        if k < 0.25:
            fn = str(rng.choice(list(GUARDED)))
            t, v, f = self.elem(depth - 1)
            return fn % t, (GUARDED[fn](v[0]), v[1]), f
        if k < 0.3:  # a small integer power
            e = int(rng.integers(2, 4))
            t, v, f = self.elem(depth - 1)
            return "(%s) ^ %d" % (t, e), (v[0] ** e, v[1]), f
        if k < 0.38:  # a comparison or step of leaves, or where() choosing by one
            if rng.random() < 0.2:
                t, v, f = self.leaf(True)
                return "step(%s)" % t, ((v[0] > 0).astype(np.float64), v[1]), f
            c = self.binop(self.leaf(True), self.leaf(True), str(rng.choice(list(COMPARE))))
            if rng.random() < 0.5:
                return c
            x, y = self.elem(depth - 1), self.elem(depth - 1)
            out = "".join(dict.fromkeys(c[1][1] + x[1][1] + y[1][1]))
            if np.prod([self.size[l] for l in out]) > MAX_ELEMENTS:
                raise TooBig()
            a = np.where(self.aligned(c[1], out) != 0, self.aligned(x[1], out), self.aligned(y[1], out))
            return ("where(%s, %s, %s)" % (c[0][1:-1], x[0], y[0]), (a, out), c[2] or x[2] or y[2])
        return self.binop(self.elem(depth - 1), self.elem(depth - 1),
                          str(rng.choice(["+", "-", "*", "*", "/"])))

    def some_of(self, labs):
        out = [c for c in labs if self.rng.random() < 0.5]
        return "".join(self.rng.permutation(out)) if out else ""

    def elem_bounded(self, depth):
        while True:
            try:
                return self.elem(depth)
            except TooBig:
                pass

    def made(self, stmt, a, f64):
        """Record statement STMT writing self.cur, its reference A: the
        tensor it replaces is forgotten (a later statement reads it only
        once the caller records the new values)."""
        name = self.cur
        self.script.append(stmt)
        a = np.asarray(a, dtype=np.float64)
        self.cases.append((name, stmt, a, f64, "%s_%d.npy" % (name, len(self.cases)), self.peak))
        self.block_written.add(name)
        self.tensors.pop(name, None)
        self.inexact.discard(name)
        self.loaded.discard(name)
        return a

    def statement(self, name):
        """Draw one statement writing NAME or, at times, replacing a tensor
        there is (its new shape and type are the statement's); False when
        none could be drawn."""
        rng = self.rng
        old = [n for n in self.tensors if n not in self.block_written]
        self.cur = str(rng.choice(old)) if old and rng.random() < 0.12 else name
        name = self.cur
        self.reads_inexact = False
        self.peak = 0.0
        kind = 0 if CHAINS else rng.random()
        if kind < 0.33:  # a product, summed implicitly
            fs = [self.ref() for _ in range(int(rng.choice([2, 2, 3, 4] if CHAINS else [2, 2, 3, 4, 4, 6, 8])))]
            labs = "".join(dict.fromkeys("".join(f[1][1] for f in fs)))
            out = self.some_of(labs)
            if np.prod([self.size[c] for c in out]) > MAX_ELEMENTS:
                return False
            spec = ",".join(f[1][1] for f in fs) + "->" + out
            self.seen(np.einsum(spec, *[np.abs(f[1][0]) for f in fs], optimize=True))
            a = np.einsum(spec, *[f[1][0] for f in fs],
                          optimize=True)
            text = " * ".join(f[0] for f in fs)
            scale = 1 if CHAINS else rng.random()
            if CHAINS and rng.random() < 0.25:  # a product under a function
                text, a = "tanh(SUM(%s))" % text, np.tanh(a)
            elif scale < 0.2:
                text, a = text + " / 4", a / 4
            elif scale < 0.3:
                text, a = "-" + text, -a
            elif scale < 0.4:
                text, a = "2.5 * " + text, a * 2.5
            f64 = any(f[2] for f in fs)
        elif kind < 0.58:  # an aggregation of an elementwise expression
            t, (v, labs), f64 = self.elem_bounded(2)
            out = self.some_of(labs)
            agg = str(rng.choice(list(REDUCE)))
            red = tuple(i for i, c in enumerate(labs) if c not in out)
            a = REDUCE[agg](v, axis=red) if red else v
            self.seen(REDUCE[agg](np.abs(v), axis=red) if red else v)
            rest = "".join(c for c in labs if c in out)
            a = np.transpose(a, [rest.index(c) for c in out]) if out else a
            text = "%s(%s)" % (agg, t)
            post = rng.random()
            if post < 0.3:
                fn = str(rng.choice(["tanh", "relu", "sigmoid"]))
                text, a = "%s(%s)" % (fn, text), UNARY[fn](a)
            elif post < 0.45:
                text, a = text + " * 0.5", a * 0.5
        elif kind < 0.66:  # a Gram product or a covariance
            cands = [n for n, (l, _) in self.tensors.items()
                     if len(l) == 2 and l[1] in TWIN and l[0] != TWIN[l[1]]]
            if not cands:
                return False
            x = str(rng.choice(cands))
            (n, i), X = self.tensors[x]
            j = TWIN[i]
            Xd = X.astype(np.float64)
            f64 = X.dtype == np.float64
            self.reads_inexact |= x in self.inexact
            out = i + j
            if rng.random() < 0.5:
                text, a = "%s[%s,%s] * %s[%s,%s]" % (x, n, i, x, n, j), Xd.T @ Xd
                self.seen(np.abs(Xd).T @ np.abs(Xd))
            else:
                mu = "MU" + x
                self.script.append("%s[%s] = MEAN(%s[%s,%s]);" % (mu, i, x, n, i))
                text = "SUM((%s[%s,%s] - %s[%s]) * (%s[%s,%s] - %s[%s]))" % (x, n, i, mu, i, x, n, j, mu, j)
                c = Xd - Xd.mean(axis=0)
                a = c.T @ c
                self.seen(np.abs(c).T @ np.abs(c))
        elif kind < 0.7:  # numbers alone
            c = round(float(rng.uniform(-3, 3)), 3)
            text, a, out, f64 = repr(c), np.array(c), "", False
        elif kind < 0.75:  # ARGMAX or ARGMIN of a tensor along one label
            t, (v, labs), f64 = self.ref(stored=True)  # exact, in the tensor's type
            if not labs:
                return False
            red = int(rng.integers(len(labs)))
            out = "".join(rng.permutation([c for c in labs if c != labs[red]]))
            agg = str(rng.choice(["ARGMAX", "ARGMIN"]))
            a = (np.argmax if agg == "ARGMAX" else np.argmin)(v, axis=red)
            rest = labs.replace(labs[red], "")
            a = np.transpose(a, [rest.index(c) for c in out]) if out else a
            text = "%s(%s)" % (agg, t)
        elif kind < 0.83:  # an aggregation inside an elementwise expression
            x = self.elem_bounded(1)
            y, (v, labs), yf = self.elem_bounded(1)
            out = "".join(dict.fromkeys(x[1][1] + self.some_of(labs)))
            red = tuple(i for i, c in enumerate(labs) if c not in out)
            if not red or np.prod([self.size[c] for c in out]) > MAX_ELEMENTS:
                return False
            agg = str(rng.choice(list(REDUCE)))
            inner = ("%s(%s)" % (agg, y), (REDUCE[agg](v, axis=red), "".join(c for c in labs if c in out)), yf)
            self.seen(REDUCE[agg](np.abs(v), axis=red))
            t, (a, labs), f64 = self.binop(x, inner, str(rng.choice(["+", "-", "*", "/"])))
            if rng.random() < 0.3:  # softmax's numerator, when x is y and agg MAX
                t, a = "exp(%s)" % t, np.exp(a)
            text = t
            a = np.transpose(a, [labs.index(c) for c in out]) if out else a
        elif kind < 0.87:  # a slice: ranges and indices, negative ones counting from the end
            if self.in_block:
                return False  # a copy, not an assignment: refused in a block
            t, (v, labs), f64 = self.ref(stored=True)
            name = t.split("[")[0]
            a = self.tensors[name][1].astype(np.float64)
            if not a.ndim:
                return False
            idx, txt = [], []
            for n in a.shape:
                lo, hi = sorted(int(x) for x in rng.integers(-n, n + 1, size=2))
                if rng.random() < 0.3:
                    i = int(rng.integers(-n, n))
                    idx.append(i)
                    txt.append(str(i))
                    continue
                if (lo + n if lo < 0 else lo) >= (hi + n if hi < 0 else hi):
                    lo, hi = None, None  # an empty range would be refused
                idx.append(slice(lo, hi))
                txt.append("%s:%s" % ("" if lo is None else lo, "" if hi is None else hi))
            a = a[tuple(idx)]
            self.made("%s = %s[%s];" % (self.cur, name, ", ".join(txt)), a, f64)
            return True
        else:  # elementwise, broadcast
            t, (v, labs), f64 = self.elem_bounded(3)
            out = "".join(rng.permutation(list(labs))) if labs else ""
            a = np.transpose(v, [labs.index(c) for c in out]) if out else v
            text = t
        f64 = f64 and not self.reads_inexact  # the tolerance: f64's only from exact operands
        a = self.made("%s[%s] = %s;" % (name, ",".join(out), text), a, f64)
        big = a.size and not (np.all(np.isfinite(a)) and np.max(np.abs(a)) < 1e30)
        # cancelled: values far below the ones they came from, known to
        # their rounding only, which later statements would carry on
        lost = a.size and self.peak > 100 * float(np.max(np.abs(a)))
        if (CHAINS or self.rng.random() < 0.5) and not big and not lost:  # later statements may read it
            self.tensors[name] = (out, a)
            if not f64:  # f32, or f64 from values known to f32's precision
                self.inexact.add(name)
        return True


def tcp_workers(tradb, n, d, procs, extra=()):
    """Start N `tradb --worker`s on loopback ports of their own (below the
    range the kernel hands out, as the multi-process tests take them);
    their endpoints once each says it listens."""
    import random
    import socket
    import time
    eps = []
    for w in range(n):
        for _ in range(20):
            port = random.randrange(10000, 30000)
            with socket.socket() as sk:
                try:
                    sk.bind(("127.0.0.1", port))
                except OSError:
                    continue
            ep = "tcp://127.0.0.1:%d" % port
            log = os.path.join(d, "w%d.log" % w)
            with open(log, "w") as f:
                p = subprocess.Popen([tradb, "--worker", "--listen", ep, "--data", os.path.join(d, "w%d" % w)]
                                     + list(extra),
                                     stdout=subprocess.DEVNULL, stderr=f)
            procs.append(p)
            deadline = time.time() + 20
            while time.time() < deadline and p.poll() is None:
                if "listening" in open(log).read():
                    break
                time.sleep(0.05)
            if p.poll() is None and "listening" in open(log).read():
                eps.append(ep)
                break
            p.kill()
        else:
            raise RuntimeError("worker %d did not start" % w)
    return eps


def run(tradb, work, seed, nstmts):
    d = os.path.join(work, "seed%d" % seed)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    os.chdir(d)
    with np.errstate(over="ignore", invalid="ignore"):
        s = Seed(seed, nstmts)
    with open("script.sql", "w") as f:  # to run again by hand: tradb db < script.sql
        f.write("\n".join(s.script) + "\n")
    procs = []  # every third seed on workers over TCP, the others on local ones
    try:
        where = (["--workers", ",".join(tcp_workers(tradb, s.workers, d, procs, s.worker_args))] if seed % 3 == 0
                 else ["--local-workers", str(s.workers)])
        p = subprocess.run([tradb] + where + ["db"], input="\n".join(s.script) + "\n",
                           capture_output=True, text=True, timeout=600)
    finally:
        for w in procs:
            w.kill()
            w.wait()
    with open("out.txt", "w") as f:
        f.write(p.stdout + p.stderr)
    # a warning (a plan placed by another scheduler than the one set, a
    # graph too large to place) is said, not wrong: every result is checked
    notes = ["tradb: " + line for line in p.stderr.splitlines() if ": warning: " in line]
    bad = ["tradb: " + line for line in p.stderr.splitlines() if ": warning: " not in line]
    for name, stmt, ref, f64, file, peak in s.cases:
        if not os.path.exists(file):
            bad.append("no result: " + stmt)
            continue
        got = np.load(file).astype(np.float64)
        if got.shape != ref.shape:
            bad.append("shape %s, expected %s: %s" % (got.shape, ref.shape, stmt))
            continue
        if not f64 and max(peak, np.nanmax(np.abs(ref)) if ref.size else 0.0) > 1e30:
            continue  # past what f32 holds on the way (exp of a large value, or the
            # sum under tanh(SUM(..)) of a chain of products: inf, or inf - inf)
        if not np.all(np.isfinite(ref)):
            continue  # an overflow: inf - inf is nan or not by the order of the sums
        tol = 1e-9 if f64 else 2e-4
        scale = max(1.0, peak, float(np.nanmax(np.abs(ref))) if ref.size else 1.0)
        if not np.allclose(got, ref, rtol=10 * tol, atol=tol * scale, equal_nan=True):
            bad.append("max error %.3g (scale %.3g, %s): %s" % (
                float(np.nanmax(np.abs(got - ref))), scale, "f64" if f64 else "f32", stmt))
    print("exprs seed %d: %d statements on %d %s workers, %d wrong" % (
        seed, len(s.cases), s.workers, "TCP" if seed % 3 == 0 else "local", len(bad)))
    for line in bad:
        print("  " + line)
    for line in notes:
        print("  (%s)" % line)
    return not bad


def main():
    tradb, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    last = int(sys.argv[4]) if len(sys.argv) > 4 else (first if len(sys.argv) > 3 else 6)
    nstmts = int(sys.argv[5]) if len(sys.argv) > 5 else 40
    ok = all([run(tradb, work, seed, nstmts) for seed in range(first, last + 1)])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
