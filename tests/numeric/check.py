#!/usr/bin/python3
"""Numeric tests: tradb against NumPy.

Makes random inputs as .npy (f32 and f64, C and Fortran order) and CSV,
runs one tradb script that loads them, evaluates EinSum statements and
saves the results, then compares every result with NumPy's within a
tolerance.  Usage: check.py TRADB WORKDIR
"""
import os
import subprocess
import sys

import numpy as np

TRADB, WORK = sys.argv[1], sys.argv[2]
os.chdir(WORK)
rng = np.random.default_rng(20261121)

def save(name, a, fortran=False):
    np.save(name + ".npy", np.asfortranarray(a) if fortran else a)
    return a

A = save("A", rng.standard_normal((70, 45)).astype(np.float32))
B = save("B", rng.standard_normal((45, 33)).astype(np.float32), fortran=True)
X = save("X", rng.standard_normal((20, 12)))           # f64
Y = save("Y", rng.standard_normal((15, 12)))           # f64
W = save("W", rng.standard_normal((12, 9)).astype(np.float32))
v = save("v", rng.standard_normal(33).astype(np.float32))
T3 = save("T3", rng.standard_normal((4, 6, 5)).astype(np.float32), fortran=True)
S = save("S", np.array(2.5, dtype=np.float64))
np.savetxt("M.csv", rng.standard_normal((6, 4)), delimiter=",", fmt="%.17g")
M = np.loadtxt("M.csv", delimiter=",")
# A chain of four mixed shapes, and a random 10-operand EinSum as
# opt_einsum's tests make them (rand_equation(10, 3, n_out=2)): 17 labels,
# each summed one in exactly two operands, more than one kernel takes.
Q = [save("Q%d" % i, rng.standard_normal(sh)) for i, sh in
     enumerate([(40, 7), (7, 55), (55, 3), (3, 60)])]
letters = "abcdefghijklmnopq"
slots = [i for i in range(15) for _ in range(2)]
while True:  # each summed label in two different operands
    rng.shuffle(slots)
    terms = [sorted(slots[3 * t:3 * t + 3]) for t in range(10)]
    if all(len(set(t)) == 3 for t in terms):
        break
terms[int(rng.integers(10))].append(15)
terms[int(rng.integers(10))].append(16)
size = {c: int(rng.integers(2, 5)) for c in letters}
Rops = [save("R%d" % t, rng.standard_normal([size[letters[c]] for c in term]))
        for t, term in enumerate(terms)]
eq = ",".join("".join(letters[c] for c in term) for term in terms) + "->pq"
ein = "Z[p,q] = " + " * ".join("R%d[%s]" % (t, ",".join(letters[c] for c in term))
                              for t, term in enumerate(terms)) + ";"

script = """
LOAD A FROM 'A.npy' CHUNK [16, 16];
LOAD B FROM 'B.npy' CHUNK [10, 7];
LOAD X FROM 'X.npy' CHUNK [7, 5];
LOAD Y FROM 'Y.npy';
LOAD W FROM 'W.npy';
LOAD v FROM 'v.npy';
LOAD T3 FROM 'T3.npy' CHUNK [3, 4, 2];
LOAD S FROM 'S.npy';
LOAD M FROM 'M.csv' TYPE f64;
""" + "".join("LOAD Q%d FROM 'Q%d.npy';\n" % (i, i) for i in range(4)) + \
    "".join("LOAD R%d FROM 'R%d.npy';\n" % (t, t) for t in range(10)) + """
Ch[i,m] = Q0[i,j] * Q1[j,k] * Q2[k,l] * Q3[l,m];
""" + ein + """
SAVE Ch TO 'Ch.out.npy';
SAVE Z TO 'Z.out.npy';
C[i,j] = A[i,k] * B[k,j];
Cv[i] = A[i,k] * B[k,j] * v[j];
D[i,j] = MAX(A[i,k] + B[k,j]);
E[i,j] = SUM((X[i,k] - Y[j,k]) ^ 2);
H[n,h] = relu(SUM(X[n,d] * W[d,h]));
P[c,a,b] = T3[a,b,c] * S[];
R[a] = SUM(T3[a,b,c] * T3[a,b,c]);
Mt[j,i] = M[i,j] / 2;
s[] = SUM(A[i,j]);
F[i,j] = SUM(tanh(A[i,k]) * (B[k,j] * 0.5));
Fx[n,h] = SUM(relu(X[n,d] - 0.25) * W[d,h]);
Fb[a,b,e] = SUM((T3[a,b,c] * 2) * exp(T3[a,e,c]));
BEGIN;
Fq[i,k] = A[i,k] - 1;
Fk[i,j] = SUM((Fq[i,k] * Fq[i,k]) * B[k,j]);
COMMIT;
EXPLAIN ANALYZE (PLAN 'CMM[k]') Fc[i,j] = SUM(tanh(A[i,k]) * (B[k,j] * 0.5));
SAVE F TO 'F.out.npy';
SAVE Fx TO 'Fx.out.npy';
SAVE Fb TO 'Fb.out.npy';
SAVE Fk TO 'Fk.out.npy';
SAVE Fc TO 'Fc.out.npy';
SAVE C TO 'C.out.npy';
SAVE Cv TO 'Cv.out.npy';
SAVE D TO 'D.out.npy';
SAVE E TO 'E.out.npy';
SAVE H TO 'H.out.npy';
SAVE P TO 'P.out.npy';
SAVE R TO 'R.out.npy';
SAVE Mt TO 'Mt.out.csv';
SAVE s TO 's.out.npy';
SAVE B TO 'B.out.npy';
SAVE X TO 'X.out.npy';
"""
# TRADB_ARGS (e.g. --workers EP1,EP2) run the same checks on remote workers.
extra = os.environ.get("TRADB_ARGS", "").split()
run = subprocess.run([TRADB] + extra, input=script, text=True, capture_output=True)
if run.returncode != 0:
    print(run.stdout)
    print(run.stderr)
    sys.exit("tradb failed with status %d" % run.returncode)

want = {
    "C": (A @ B, "f4"),
    "Cv": (A @ B @ v, "f4"),
    "D": ((A[:, :, None] + B[None, :, :]).max(axis=1), "f4"),
    "E": (((X[:, None, :] - Y[None, :, :]) ** 2).sum(axis=2), "f8"),
    "H": (np.maximum(X @ W.astype(np.float64), 0), "f8"),
    "P": (np.transpose(T3, (2, 0, 1)).astype(np.float64) * 2.5, "f8"),
    "R": ((T3 * T3).sum(axis=(1, 2)), "f4"),
    "s": (A.sum(dtype=np.float64), "f4"),
    "B": (B, "f4"),
    "X": (X, "f8"),
    "Ch": (Q[0] @ Q[1] @ Q[2] @ Q[3], "f8"),
    "Z": (np.einsum(eq, *Rops, optimize=True), "f8"),
    # elementwise factors fused into the product's gemm task
    "F": (np.tanh(A) @ (B * 0.5), "f4"),
    "Fx": (np.maximum(X - 0.25, 0) @ W.astype(np.float64), "f8"),
    "Fb": (np.einsum("abc,aec->abe", T3 * 2, np.exp(T3)), "f4"),
    "Fk": (((A - 1) * (A - 1)) @ B, "f4"),
    "Fc": (np.tanh(A) @ (B * 0.5), "f4"),  # partial sums over k combined
}
failed = 0
passed = 0
for name, (ref, dt) in want.items():
    got = np.load(name + ".out.npy")
    ok = got.shape == np.shape(ref) and got.dtype == np.dtype(dt)
    exact = name in ("B", "X")
    if ok:
        tol = 0 if exact else (1e-4 if dt == "f4" else 1e-10)
        err = np.max(np.abs(got - ref)) if got.size else 0
        scale = max(1.0, float(np.max(np.abs(ref))))
        ok = err <= tol * scale
    print("%-4s %s %s" % ("ok" if ok else "FAIL", name, got.shape))
    if ok:
        passed += 1
    else:
        failed += 1
        print("  got dtype %s shape %s, want %s %s" % (got.dtype, got.shape, dt, np.shape(ref)))
got = np.loadtxt("Mt.out.csv", delimiter=",")
ok = got.shape == (4, 6) and np.array_equal(got, M.T / 2)
print("%-4s Mt (csv)" % ("ok" if ok else "FAIL"))
passed, failed = passed + ok, failed + (not ok)
print("numeric: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
