#!/usr/bin/python3
"""Expressions against NumPy: random statements over random tensors.

Each seed makes one tradb session (1 to 4 local workers, `layout` auto or
declared by turns) over nine random tensors of rank 0 to 3 on labels of
random sizes (1 included), f32 or f64 (a fifth), LOADed in random chunks,
and runs statements drawn at random, each SAVEd and compared with NumPy in
f64:

  - products of 2 to 4 references with the labels not on the left summed
    implicitly, scaled, negated or divided by a number, a reference's label
    sometimes renamed to another of its size (a diagonal, or a Gram
    product's second factor);
  - SUM, MAX, MIN or MEAN of an elementwise expression (+ - *, unary
    functions, numbers), then a function or a scale;
  - elementwise expressions with broadcasting;
  - a Gram product X^T X or a covariance around MEAN of one tensor;
  - numbers alone (`s[] = -1.25;`);

one by one or in blocks (BEGIN .. COMMIT) of 2 to 4, a statement reading
the outputs of earlier ones (of its block too) as well as the tensors.

Every statement is valid, so any error fails the seed.  A statement that
reads an f64 tensor computes in f64 and must match to f64 precision.  What
it found: a product's factor summed on its own first made an f32
temporary inside an f64 statement (results off in the 7th digit), and a
scalar of numbers alone had no runnable plan.

Usage: exprs.py TRADB WORKDIR [FIRST [LAST] [STATEMENTS]]   seeds FIRST..LAST
(default 1..6, 40 statements each: what make check runs).
"""
import os
import shutil
import subprocess
import sys

import numpy as np

LABELS = "abcdefg"
TWIN = {"a": "b", "b": "a", "d": "e", "e": "d"}  # labels of equal size
UNARY = {"exp": np.exp, "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0),
         "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "abs": np.abs, "neg": np.negative,
         "step": lambda x: (x > 0).astype(x.dtype)}
REDUCE = {"SUM": np.sum, "MAX": np.max, "MIN": np.min, "MEAN": np.mean}
MAX_ELEMENTS = 2e6  # an expression's broadcast size, for NumPy's sake
# label sizes; EXPRS_SIZES=1,64,130,257 tries larger ones (chunks cut in
# pieces, gemm panels), not in make check: GBs of memory, minutes a seed
SIZES = [int(x) for x in os.environ.get("EXPRS_SIZES", "1,2,3,5,7,8,13,16,33").split(",")]


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
        self.script = ["SET layout = %s;" % ("auto" if seed % 2 else "declared")]
        self.cases = []  # (name, statement, reference, f64)
        self.workers = 1 + seed % 4
        for t in range(9):
            self.tensor("T%d" % t)
        s = 0
        while s < nstmts:  # one by one, or a block of 2 to 4 reading each other
            n = 1 if self.rng.random() < 0.7 else int(self.rng.integers(2, 5))
            names = ["R%d" % i for i in range(s, min(s + n, nstmts))]
            if len(names) > 1:
                self.script.append("BEGIN;")
            made = [name for name in names if self.statement(name)]
            if len(names) > 1:
                self.script.append("COMMIT;")
            self.script += ["SAVE %s TO '%s.npy';" % (name, name) for name in made]
            s += len(names)

    def tensor(self, name):
        rng = self.rng
        rank = int(rng.choice([0, 1, 2, 2, 2, 3, 3]))
        labs = "".join(rng.choice(list(LABELS), size=rank, replace=False)) if rank else ""
        shape = [self.size[c] for c in labs]
        a = rng.standard_normal(shape).astype(np.float64 if rng.random() < 0.2 else np.float32)
        np.save(name + ".npy", a)
        self.tensors[name] = (labs, a)
        chunk = ""
        if rank and rng.random() < 0.8:
            chunk = " CHUNK [%s]" % ", ".join(str(int(rng.integers(1, s + 1))) for s in shape)
        self.script.append("LOAD %s FROM '%s.npy'%s;" % (name, name, chunk))

    # A value: (text, (array over labels, labels), reads f64)
    def ref(self):
        name = str(self.rng.choice(list(self.tensors)))
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
        f = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
        return ("(%s %s %s)" % (x[0], op, y[0]),
                (f(self.aligned(x[1], out), self.aligned(y[1], out)), out), x[2] or y[2])

    def elem(self, depth):
        rng = self.rng
        if depth <= 0 or rng.random() < 0.3:
            if rng.random() < 0.15:
                c = round(float(rng.uniform(-2, 2)), 3)
                return repr(c), (np.array(c), ""), False
            return self.ref()
        if rng.random() < 0.25:
            fn = str(rng.choice(list(UNARY)))
            t, v, f = self.elem(depth - 1)
            return "%s(%s)" % (fn, t), (UNARY[fn](v[0]), v[1]), f
        return self.binop(self.elem(depth - 1), self.elem(depth - 1), str(rng.choice(["+", "-", "*"])))

    def some_of(self, labs):
        out = [c for c in labs if self.rng.random() < 0.5]
        return "".join(self.rng.permutation(out)) if out else ""

    def elem_bounded(self, depth):
        while True:
            try:
                return self.elem(depth)
            except TooBig:
                pass

    def statement(self, name):
        rng = self.rng
        self.reads_inexact = False
        kind = rng.random()
        if kind < 0.4:  # a product, summed implicitly
            fs = [self.ref() for _ in range(int(rng.choice([2, 2, 3, 4])))]
            labs = "".join(dict.fromkeys("".join(f[1][1] for f in fs)))
            out = self.some_of(labs)
            if np.prod([self.size[c] for c in out]) > MAX_ELEMENTS:
                return False
            a = np.einsum(",".join(f[1][1] for f in fs) + "->" + out, *[f[1][0] for f in fs],
                          optimize=True)
            text = " * ".join(f[0] for f in fs)
            scale = rng.random()
            if scale < 0.2:
                text, a = text + " / 4", a / 4
            elif scale < 0.3:
                text, a = "-" + text, -a
            elif scale < 0.4:
                text, a = "2.5 * " + text, a * 2.5
            f64 = any(f[2] for f in fs)
        elif kind < 0.7:  # an aggregation of an elementwise expression
            t, (v, labs), f64 = self.elem_bounded(2)
            out = self.some_of(labs)
            agg = str(rng.choice(list(REDUCE)))
            red = tuple(i for i, c in enumerate(labs) if c not in out)
            a = REDUCE[agg](v, axis=red) if red else v
            rest = "".join(c for c in labs if c in out)
            a = np.transpose(a, [rest.index(c) for c in out]) if out else a
            text = "%s(%s)" % (agg, t)
            post = rng.random()
            if post < 0.3:
                fn = str(rng.choice(["tanh", "relu", "sigmoid"]))
                text, a = "%s(%s)" % (fn, text), UNARY[fn](a)
            elif post < 0.45:
                text, a = text + " * 0.5", a * 0.5
        elif kind < 0.8:  # a Gram product or a covariance
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
            else:
                mu = "MU" + x
                self.script.append("%s[%s] = MEAN(%s[%s,%s]);" % (mu, i, x, n, i))
                text = "SUM((%s[%s,%s] - %s[%s]) * (%s[%s,%s] - %s[%s]))" % (x, n, i, mu, i, x, n, j, mu, j)
                c = Xd - Xd.mean(axis=0)
                a = c.T @ c
        elif kind < 0.85:  # numbers alone
            c = round(float(rng.uniform(-3, 3)), 3)
            text, a, out, f64 = repr(c), np.array(c), "", False
        else:  # elementwise, broadcast
            t, (v, labs), f64 = self.elem_bounded(3)
            out = "".join(rng.permutation(list(labs))) if labs else ""
            a = np.transpose(v, [labs.index(c) for c in out]) if out else v
            text = t
        f64 = f64 and not self.reads_inexact  # the tolerance: f64's only from exact operands
        stmt = "%s[%s] = %s;" % (name, ",".join(out), text)
        self.script.append(stmt)
        a = np.asarray(a, dtype=np.float64)
        self.cases.append((name, stmt, a, f64))
        if self.rng.random() < 0.5:  # later statements may read it
            self.tensors[name] = (out, a)
            if not f64:  # f32, or f64 from values known to f32's precision
                self.inexact.add(name)
        return True


def run(tradb, work, seed, nstmts):
    d = os.path.join(work, "seed%d" % seed)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    os.chdir(d)
    with np.errstate(over="ignore", invalid="ignore"):
        s = Seed(seed, nstmts)
    p = subprocess.run([tradb, "--local-workers", str(s.workers), "db"], input="\n".join(s.script) + "\n",
                       capture_output=True, text=True, timeout=600)
    bad = ["tradb: " + line for line in p.stderr.splitlines()]
    for name, stmt, ref, f64 in s.cases:
        if not os.path.exists(name + ".npy"):
            bad.append("no result: " + stmt)
            continue
        got = np.load(name + ".npy").astype(np.float64)
        if not f64 and ref.size and np.nanmax(np.abs(ref)) > 1e30:
            continue  # past what f32 holds on the way (exp of a large value)
        tol = 1e-9 if f64 else 2e-4
        scale = max(1.0, float(np.nanmax(np.abs(ref)))) if ref.size else 1.0
        if got.shape != ref.shape:
            bad.append("shape %s, expected %s: %s" % (got.shape, ref.shape, stmt))
        elif not np.allclose(got, ref, rtol=10 * tol, atol=tol * scale, equal_nan=True):
            bad.append("max error %.3g (scale %.3g, %s): %s" % (
                float(np.nanmax(np.abs(got - ref))), scale, "f64" if f64 else "f32", stmt))
    print("exprs seed %d: %d statements on %d workers, %d wrong" % (seed, len(s.cases), s.workers, len(bad)))
    for line in bad:
        print("  " + line)
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
