#!/usr/bin/python3
"""Plans against NumPy: random statements on tensors in random chunks.

Each seed makes one tradb session on 1 to 4 local workers, under a random
`layout` and `replication`: it LOADs random operands (f64, or f32 in one
session of four) in random declared chunks (even, halves, thirds, or any
size), declares some outputs in chunks of their own, runs a statement
drawn from FORMS on them (or a random block of matrix statements, each on
inputs or earlier outputs) and SAVEs the result, which must equal NumPy's.
A statement that fails counts as wrong: every one of them is valid.  What
it has found: a transpose, a copy or an outer product into a tensor
declared in other chunks than its operands' (and a diagonal read in other
chunks than stored) had no runnable plan, mostly on 3 or more workers:
seed 1 failed then.

Usage: plans.py TRADB WORKDIR [FIRST [LAST]]   seeds FIRST..LAST (default
1..4, what make check runs); TRADB_ARGS (e.g. --workers EP1,EP2) replaces
the local workers.
"""
import os
import random
import re
import shutil
import subprocess
import sys

import numpy as np

# statement (operands named by the letters in braces, output {o}), the
# labels of each operand, and NumPy's answer
FORMS = [
    ("{o}[i,j] = {A}[i,k] * {B}[k,j];", ["ik", "kj"], lambda A, B: A @ B),
    ("{o}[i,l] = {A}[i,j] * {B}[j,k] * {C}[k,l];", ["ij", "jk", "kl"], lambda A, B, C: A @ B @ C),
    ("{o}[i,m] = {A}[i,j] * {B}[j,k] * {C}[k,l] * {D}[l,m];", ["ij", "jk", "kl", "lm"],
     lambda A, B, C, D: A @ B @ C @ D),
    ("{o}[i,j] = relu(SUM({A}[i,k] * {B}[k,j]));", ["ik", "kj"], lambda A, B: np.maximum(A @ B, 0)),
    ("{o}[i,j] = tanh(SUM({A}[i,k] * {B}[k,j]));", ["ik", "kj"], lambda A, B: np.tanh(A @ B)),
    ("{o}[i,j] = {A}[i,j] - {B}[j];", ["ij", "j"], lambda A, B: A - B),
    ("{o}[i] = SUM({A}[i,k] * {B}[i,k]);", ["ik", "ik"], lambda A, B: (A * B).sum(1)),
    ("{o}[j,i] = {A}[i,j];", ["ij"], lambda A: A.T),
    ("{o}[i] = MAX({A}[i,k]);", ["ik"], lambda A: A.max(1)),
    ("{o}[] = MIN({A}[i,k] * {B}[k]);", ["ik", "k"], lambda A, B: (A * B).min()),
    ("{o}[i,j] = SUM({A}[i,k] * {B}[k,j]) * (1 - {C}[i,j] * {C}[i,j]);", ["ik", "kj", "ij"],
     lambda A, B, C: (A @ B) * (1 - C * C)),
    ("{o}[b,i,j] = {A}[b,i,k] * {B}[b,k,j];", ["bik", "bkj"], lambda A, B: np.einsum("bik,bkj->bij", A, B)),
    ("{o}[i,j] = {A}[i,k] * {B}[j,k];", ["ik", "jk"], lambda A, B: A @ B.T),
    ("{o}[i] = {A}[i,i];", ["ii"], lambda A: np.diag(A).copy()),
    ("{o}[i,j] = sigmoid({A}[i,j]) + exp({B}[i,j]);", ["ij", "ij"],
     lambda A, B: 1 / (1 + np.exp(-A)) + np.exp(B)),
    ("{o}[a,c] = SUM({A}[a,b,d] * {B}[b,d,c]);", ["abd", "bdc"], lambda A, B: np.einsum("abd,bdc->ac", A, B)),
    ("{o}[i,j] = {A}[i] * {B}[j];", ["i", "j"], np.outer),
    ("BEGIN; {o}x[i,j] = relu(SUM({A}[i,k] * {B}[k,j])); {o}[i,l] = {o}x[i,j] * {C}[j,l]; COMMIT;",
     ["ik", "kj", "jl"], lambda A, B, C: np.maximum(A @ B, 0) @ C),
    ("BEGIN; {o}x[i] = MAX({A}[i,k]); {o}[i,k] = exp({A}[i,k] - {o}x[i]); COMMIT;", ["ik"],
     lambda A: np.exp(A - A.max(1, keepdims=True))),
    ("{o}[] = SUM({A}[i,j] * {B}[i,j]);", ["ij", "ij"], lambda A, B: (A * B).sum()),
    ("{o}[i,j] = MAX({A}[i,k] + {B}[k,j]);", ["ik", "kj"], lambda A, B: (A[:, :, None] + B[None, :, :]).max(1)),
    ("{o}[i,j] = {A}[i,k] * {A}[k,j];", ["ii"], lambda A: A @ A),  # one operand twice
    ("{o}[i,j] = {A}[i,j] - {A}[j,i];", ["ii"], lambda A: A - A.T),
    ("{A}[i,j] = {A}[i,j] - 0.5 * {B}[i,j];", ["ij", "ij"], lambda A, B: A - 0.5 * B),  # in place
    ("{o}[i] = SUM({A}[i,j,k]);", ["ijk"], lambda A: A.sum((1, 2))),
    ("{o}[i,j] = {A}[i,j] * {B}[];", ["ij", ""], lambda A, B: A * B),
    ("{o}[i,j] = exp(-1 * {A}[i,j]) / (1 + {B}[i,j] * {B}[i,j]);", ["ij", "ij"],
     lambda A, B: np.exp(-A) / (1 + B * B)),
    ("BEGIN; {o}x[i,j] = {A}[i,k] * {B}[k,j]; {o}y[j] = SUM({o}x[i,j]); {o}[i,j] = {o}x[i,j] - {o}y[j]; COMMIT;",
     ["ik", "kj"], lambda A, B: (A @ B) - (A @ B).sum(0)),
]
SIZES = [1, 2, 3, 5, 8, 13, 16, 31, 32, 47, 64, 70, 129]
STATEMENTS = 40


def dag(rng, c, load, lines, want, d):
    """A block of 3 to 6 matrix statements, each on inputs or earlier
    outputs of the block (the thesis's format experiment, drawn at random):
    products, sums, maps and transposes.  Appends its lines and each
    output's expected value."""
    pool, stmts = [], []

    def fresh(shape):
        name = "t%d_%d" % (c, len(pool))
        pool.append((name, load(name, shape)))
        return pool[-1]

    fresh((rng.choice(SIZES), rng.choice(SIZES)))
    for s in range(rng.randint(3, 6)):
        x = rng.choice(pool)
        out, op = "o%d_%d" % (c, s), rng.choice(["mm", "mm", "mm", "add", "relu", "t"])
        if op == "mm":
            fit = [p for p in pool if p[1].shape[0] == x[1].shape[1]]
            y = rng.choice(fit) if fit and rng.random() < 0.5 else fresh((x[1].shape[1], rng.choice(SIZES)))
            stmt, val = "%s[i,j] = %s[i,k] * %s[k,j];" % (out, x[0], y[0]), x[1] @ y[1]
        elif op == "add":
            fit = [p for p in pool if p[1].shape == x[1].shape and p is not x]
            y = rng.choice(fit) if fit else fresh(x[1].shape)
            stmt, val = "%s[i,j] = %s[i,j] + 0.5 * %s[i,j];" % (out, x[0], y[0]), x[1] + 0.5 * y[1]
        elif op == "relu":
            stmt, val = "%s[i,j] = relu(%s[i,j]);" % (out, x[0]), np.maximum(x[1], 0)
        else:
            stmt, val = "%s[j,i] = %s[i,j];" % (out, x[0]), x[1].T
        pool.append((out, val))
        stmts.append(stmt)
        want.append((out, val, stmt, {}))
    lines.append("BEGIN; %s COMMIT;" % " ".join(stmts))
    lines.extend("SAVE %s TO '%s/%s.npy';" % (w[0], d, w[0]) for w in want[-len(stmts):])


def session(tradb, work, seed):
    """Run seed's session in work/SEED; returns the wrong results' lines."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    d = os.path.join(work, "s%d" % seed)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)

    def chunk(n):
        return rng.choice([n, max(1, n // 2), max(1, n // 3), rng.randint(1, n)])

    nworkers = rng.choice([1, 2, 3, 4, 4])
    dtype = rng.choice(["f64", "f64", "f64", "f32"])
    tol = 1e-9 if dtype == "f64" else 2e-4  # relative to the result's largest magnitude
    layout = rng.choice(["auto", "auto", "declared"])
    lines = ["SET layout = %s;" % layout, "SET replication = %d;" % rng.choice([1, 2, 2, 3])]
    # `declared` runs a chain written as one statement as one join over all
    # its labels, as tradb did before it split products: minutes at 512
    forms = [f for f in FORMS if layout == "auto" or f[0].startswith("BEGIN") or len(set("".join(f[1]))) <= 3]
    want = []

    def load(name, shape):
        """A random operand: saved, LOADed in random chunks; what tradb holds."""
        a = nrng.uniform(-1, 1, shape)
        np.save(os.path.join(d, name + ".npy"), a)
        chunks = " CHUNK [%s]" % ", ".join(str(chunk(n)) for n in shape) if shape else ""
        lines.append("LOAD %s FROM '%s/%s.npy'%s TYPE %s;" % (name, d, name, chunks, dtype))
        return a.astype(np.float32).astype(np.float64) if dtype == "f32" else a

    for c in range(STATEMENTS):
        if rng.random() < 0.15:
            dag(rng, c, load, lines, want, d)
            continue
        form, labels, numpy = rng.choice(forms)
        size, names, args = {}, {}, []
        for k, labs in enumerate(labels):
            shape = [size.setdefault(lab, rng.choice(SIZES)) for lab in labs]
            names["ABCD"[k]] = "t%d_%s" % (c, "ABCD"[k])
            args.append(load(names["ABCD"[k]], shape))
        if "ii" in labels:  # a square operand: its statement's labels all have its size
            for lab in "jk":
                size[lab] = size["i"]
        out = names["A"] if form.startswith("{A}") else "o%d" % c
        olabels = re.findall(r"\{o\}\[([a-z,]*)\]", form)
        olabels = olabels[-1].replace(",", "") if olabels else ""  # the last output's
        if olabels and rng.random() < 0.4:
            oshape = [size[lab] for lab in olabels]
            lines.append("CREATE TENSOR %s[%s] CHUNK [%s] TYPE %s;"
                         % (out, ", ".join(map(str, oshape)), ", ".join(str(chunk(n)) for n in oshape), dtype))
        stmt = form.format(o=out, **names)
        lines.append(stmt)
        lines.append("SAVE %s TO '%s/%s.npy';" % (out, d, out))
        want.append((out, numpy(*args), stmt, size))
    with open(os.path.join(d, "script.tql"), "w") as f:  # to run again by hand
        f.write("\n".join(lines) + "\n")
    extra = os.environ.get("TRADB_ARGS", "").split() or ["--local-workers", str(nworkers)]
    run = subprocess.run([tradb] + extra + [os.path.join(d, "db")], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, timeout=int(os.environ.get("PLANS_TIMEOUT", "600")))
    said = [ln for ln in (run.stdout + run.stderr).splitlines() if ln.startswith("line ")]
    bad = []
    for out, ref, stmt, size in want:
        f = os.path.join(d, out + ".npy")
        got = np.load(f) if os.path.exists(f) else None
        scale = tol * max(1.0, float(np.max(np.abs(ref))) if np.size(ref) else 1.0)
        if got is None or got.shape != np.shape(ref) or not np.allclose(got, ref, rtol=tol, atol=scale):
            bad.append("seed %d (%d workers, %s): %s with sizes %s: %s" % (
                seed, nworkers, dtype, stmt, size, "not saved" if got is None else
                "shape %s, want %s" % (got.shape, np.shape(ref)) if got.shape != np.shape(ref) else
                "off by %.3g" % np.abs(got - ref).max()))
    # a warning (a replication above the workers there are) is not an error
    bad += ["seed %d: %s" % (seed, ln) for ln in said if "warning:" not in ln]
    if not bad:
        shutil.rmtree(d, ignore_errors=True)
    return bad


def main(argv):
    tradb, work = argv[1], argv[2]
    first = int(argv[3]) if len(argv) > 3 else 1
    last = int(argv[4]) if len(argv) > 4 else (first if len(argv) > 3 else 4)
    bad = []
    for seed in range(first, last + 1):
        b = session(tradb, work, seed)
        print("%-4s seed %d" % ("ok" if not b else "FAIL", seed))
        bad += b
    for ln in bad:
        print("  " + ln)
    print("plans: %d seeds, %d wrong" % (last - first + 1, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
