#!/usr/bin/python3
"""Numeric tests of everyday data work: tradb against NumPy.

Comparisons, where, step, MEAN, ARGMAX and ARGMIN (with ties, and with the
aggregated label cut by chunk boundaries), the composed accuracy
MEAN(ARGMAX(P) == ARGMAX(Y)), slices with negative indices and SAVE of a
slice, over several chunkings; then .npy files of bool, integer and
float16 types and CSV files with a header and ';' or tab delimiters.
Usage: check_data.py TRADB WORKDIR
"""
import os
import subprocess
import sys

import numpy as np

TRADB, WORK = sys.argv[1], sys.argv[2]
os.chdir(WORK)
rng = np.random.default_rng(20261124)
extra = os.environ.get("TRADB_ARGS", "").split()
results = {"passed": 0, "failed": 0}


def tradb(script, want_ok=True):
    run = subprocess.run([TRADB] + extra, input=script, text=True,
                         capture_output=True)
    if (run.returncode == 0) != want_ok:
        print(run.stdout)
        print(run.stderr)
        sys.exit("tradb exited with status %d" % run.returncode)
    return run


def check(label, got, ref, dt, tol=0.0):
    ok = got.shape == np.shape(ref) and got.dtype == np.dtype(dt)
    if ok and got.size:
        ok = np.allclose(got, ref, rtol=0, atol=tol, equal_nan=True)
    print("%-4s %s %s" % ("ok" if ok else "FAIL", label, got.shape))
    if not ok:
        print("  got %s %s:\n%s\n  want %s %s:\n%s"
              % (got.dtype, got.shape, got, dt, np.shape(ref), ref))
    results["passed" if ok else "failed"] += 1


# Small integers make ties common: ARGMAX/ARGMIN must give the first index
# of the extreme (as NumPy does) and == / <= / >= meet equal values.
P = rng.integers(0, 4, (37, 11)).astype(np.float32)
Y = np.eye(11, dtype=np.float32)[rng.integers(0, 11, 37)]
Q = rng.integers(0, 4, (37, 11)).astype(np.float32)
Z = rng.standard_normal((37, 11)).astype(np.float32)
for name, a in (("P", P), ("Y", Y), ("Q", Q), ("Z", Z)):
    np.save(name + ".npy", a)

want = {
    "lt": ((P < Q).astype(np.float32), "f4", 0),
    "le": ((P <= Q).astype(np.float32), "f4", 0),
    "gt": ((P > Q).astype(np.float32), "f4", 0),
    "ge": ((P >= Q).astype(np.float32), "f4", 0),
    "eq": ((P == Q).astype(np.float32), "f4", 0),
    "ne": ((P != Q).astype(np.float32), "f4", 0),
    "wh": (np.where(Z > 0, Z, 0.1 * Z), "f4", 1e-6),
    "st": ((Z > 0).astype(np.float32), "f4", 0),
    "cnt": ((P > Q).sum(axis=1).astype(np.float32), "f4", 0),
    "mr": (P.mean(axis=1), "f4", 1e-5),
    "mc": (Z.mean(axis=0), "f4", 1e-5),
    "mall": (np.array(Z.mean(dtype=np.float64)), "f4", 1e-5),
    "amr": (P.argmax(axis=1).astype(np.float32), "f4", 0),
    "amc": (P.argmax(axis=0).astype(np.float32), "f4", 0),
    "anr": (P.argmin(axis=1).astype(np.float32), "f4", 0),
    "anc": (Z.argmin(axis=0).astype(np.float32), "f4", 0),
    "acc": (np.array(np.mean(P.argmax(1) == Y.argmax(1))), "f4", 1e-6),
    "sl": (P[-5:, 2:-3], "f4", 0),
    "sv": (Z[3:-30, -4:], "f4", 0),
}
script = """
LOAD P FROM 'P.npy' CHUNK [%(c)s];
LOAD Y FROM 'Y.npy' CHUNK [%(c)s];
LOAD Q FROM 'Q.npy' CHUNK [%(c)s];
LOAD Z FROM 'Z.npy' CHUNK [%(c)s];
lt[n,l] = P[n,l] < Q[n,l];
le[n,l] = P[n,l] <= Q[n,l];
gt[n,l] = P[n,l] > Q[n,l];
ge[n,l] = P[n,l] >= Q[n,l];
eq[n,l] = P[n,l] == Q[n,l];
ne[n,l] = P[n,l] != Q[n,l];
wh[n,l] = where(Z[n,l] > 0, Z[n,l], 0.1 * Z[n,l]);
st[n,l] = step(Z[n,l]);
cnt[n] = SUM(P[n,l] > Q[n,l]);
mr[n] = MEAN(P[n,l]);
mc[l] = MEAN(Z[n,l]);
mall[] = MEAN(Z[n,l]);
amr[n] = ARGMAX(P[n,l]);
amc[l] = ARGMAX(P[n,l]);
anr[n] = ARGMIN(P[n,l]);
anc[l] = ARGMIN(Z[n,l]);
acc[] = MEAN(ARGMAX(P[n,l]) == ARGMAX(Y[n,l]));
sl = P[-5:, 2:-3];
SAVE Z[3:-30, -4:] TO 'sv.out.npy';
""" + "".join("SAVE %s TO '%s.out.npy';\n" % (k, k) for k in want if k != "sv")
# Chunkings: one chunk, chunks that cut both labels unevenly, a column of
# single elements (every ARGMAX compares across chunks).
for chunk in ("37, 11", "8, 3", "5, 4", "1, 11", "37, 1"):
    tradb(script % {"c": chunk})
    for name, (ref, dt, tol) in want.items():
        check("%s chunk [%s]" % (name, chunk), np.load(name + ".out.npy"),
              ref, dt, tol)

# f64 statements: MEAN and ARGMAX in f64.
D = rng.standard_normal((23, 9))
np.save("D.npy", D)
tradb("""LOAD D FROM 'D.npy' CHUNK [6, 4];
dm[a] = MEAN(D[a,b]); da[b] = ARGMAX(D[a,b]);
SAVE dm TO 'dm.out.npy'; SAVE da TO 'da.out.npy';""")
check("dm f64", np.load("dm.out.npy"), D.mean(axis=1), "f8", 1e-12)
check("da f64", np.load("da.out.npy"), D.argmax(axis=0).astype(np.float64),
      "f8", 0)

# NaN is skipped by the arg-forms, as by NumPy's nanargmax / nanargmin; a
# row of NaN only gives nan (where NumPy raises).
N = rng.standard_normal((9, 7)).astype(np.float32)
N[rng.random((9, 7)) < 0.3] = np.nan
N[4, :] = np.nan
np.save("N.npy", N)
tradb("""LOAD N FROM 'N.npy' CHUNK [4, 3];
na[i] = ARGMAX(N[i,j]); ni[i] = ARGMIN(N[i,j]);
SAVE na TO 'na.out.npy'; SAVE ni TO 'ni.out.npy';""")
for name, fn in (("na", np.nanargmax), ("ni", np.nanargmin)):
    ref = np.array([fn(r) if not np.isnan(r).all() else np.nan for r in N],
                   dtype=np.float32)
    check("%s with NaN" % name, np.load(name + ".out.npy"), ref, "f4", 0)

# .npy of other types, converted exactly to f32 (default) or f64.
typed = {
    "b": np.array([[True, False, True], [False, False, True]]),
    "i8": np.array([-128, 0, 127], dtype=np.int8),
    "u8": np.array([0, 200, 255], dtype=np.uint8),
    "i16": np.array([-32768, 7, 32767], dtype=np.int16),
    "u16": np.array([0, 65535, 1], dtype=np.uint16),
    "i32": np.arange(-6, 6, dtype=np.int32).reshape(3, 4),
    "u32": np.array([0, 1 << 24, 3], dtype=np.uint32),
    "i64": np.array([-(1 << 24), 5, 1 << 24], dtype=np.int64),
    "u64": np.array([0, 1 << 20, 9], dtype=np.uint64),
    "h": np.array([1.5, -0.0009765625, 65504, np.inf, np.nan], dtype=np.float16),
    "hf": np.asfortranarray(rng.standard_normal((4, 3)).astype(np.float16)),
}
big = np.array([(1 << 53) - 1, -(1 << 53), 12], dtype=np.int64)
np.save("big.npy", big)
for name, a in typed.items():
    np.save(name + ".npy", a)
tradb("".join("LOAD %s FROM '%s.npy' CHUNK [2%s];\nSAVE %s TO '%s.out.npy';\n"
              % (n, n, ", 2" * (a.ndim - 1), n, n) for n, a in typed.items())
      + "LOAD big FROM 'big.npy' TYPE f64;\nSAVE big TO 'big.out.npy';\n")
for name, a in typed.items():
    check("npy %s" % a.dtype, np.load(name + ".out.npy"), a.astype(np.float32),
          "f4", 0)
check("npy int64 as f64", np.load("big.out.npy"), big.astype(np.float64), "f8", 0)
# 2^53 - 1 does not fit in f32: refused, and nothing is made.
run = tradb("LOAD big FROM 'big.npy';", want_ok=False)
ok = "9007199254740991" in run.stderr
print("%-4s int64 not exact in f32 refused" % ("ok" if ok else "FAIL"))
results["passed" if ok else "failed"] += 1

# CSV with a header row, ';' and tab delimiters, and empty fields as NaN.
C = rng.standard_normal((9, 4))
np.savetxt("semi.csv", C, delimiter=";", fmt="%.17g",
           header="a;b;c;d", comments="")
np.savetxt("tab.csv", C, delimiter="\t", fmt="%.17g",
           header="x\ty\tz\tw", comments="")
np.savetxt("plain.csv", C, delimiter=",", fmt="%.17g")
with open("null.csv", "w") as f:
    f.write("p,q,r\n1,,3\n,5,6\n")
tradb("""LOAD semi FROM 'semi.csv' TYPE f64;
LOAD tab FROM 'tab.csv' TYPE f64;
LOAD forced FROM 'semi.csv' (HEADER, DELIMITER ';') TYPE f64;
LOAD plain FROM 'plain.csv' (DELIMITER ',') TYPE f64;
LOAD nul FROM 'null.csv' (NULL nan) TYPE f64;
SAVE semi TO 'semi.out.npy'; SAVE tab TO 'tab.out.npy';
SAVE forced TO 'forced.out.npy'; SAVE plain TO 'plain.out.npy';
SAVE nul TO 'nul.out.npy';""")
for name in ("semi", "tab", "forced", "plain"):
    check("csv %s" % name, np.load(name + ".out.npy"), C, "f8", 0)
check("csv NULL nan", np.load("nul.out.npy"),
      np.genfromtxt("null.csv", delimiter=",", skip_header=1), "f8", 0)

print("numeric data: %(passed)d passed, %(failed)d failed" % results)
sys.exit(1 if results["failed"] else 0)
