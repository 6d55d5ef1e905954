#!/usr/bin/python3
"""Numeric tests of independent subnet training (scripts/ist.py) in tradb.

1. FILL PERMUTATION: every hidden neuron in exactly one subnet, the same
   tensor for the same seed whatever the chunking, another for another
   seed.
2. One IST round (partition, J local steps, write-back) on tiny sizes,
   run by tradb, against a NumPy reference written with index arrays
   (each subnet's rows and columns cut out and put back), not EinSums.
3. One data-parallel step against NumPy's.
Usage: ist_check.py TRADB WORKDIR TOP_SRCDIR
"""
import os
import subprocess
import sys

import numpy as np

TRADB, WORK, TOP = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(TOP, "scripts"))
import ist  # noqa: E402

os.chdir(WORK)
rng = np.random.default_rng(20261124)
failed = passed = 0


def check(name, ok, detail=""):
    global failed, passed
    print("%-4s %s %s" % ("ok" if ok else "FAIL", name, detail))
    passed, failed = passed + bool(ok), failed + (not ok)


def tradb(script):
    run = subprocess.run([TRADB, "--local-workers", "2"], input=script, text=True,
                         capture_output=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        sys.exit("tradb failed with status %d" % run.returncode)
    return run.stdout


# ---- 1. the partition ------------------------------------------------------
tradb("""
CREATE TENSOR P[3, 4, 12] CHUNK [1, 4, 12];
FILL P PERMUTATION SEED 77;
CREATE TENSOR Q[3, 4, 12] CHUNK [2, 3, 5];
FILL Q PERMUTATION SEED 77;
CREATE TENSOR R[3, 4, 12];
FILL R PERMUTATION SEED 78;
SAVE P TO 'P.npy'; SAVE Q TO 'Q.npy'; SAVE R TO 'R.npy';
""")
P, Q, R = np.load("P.npy"), np.load("Q.npy"), np.load("R.npy")
one_hot = set(np.unique(P)) <= {0.0, 1.0}
check("partition: one-hot", one_hot)
check("partition: each neuron in exactly one subnet",
      np.array_equal(P.sum(axis=(0, 1)), np.ones(12)))
check("partition: each subnet position holds one neuron",
      np.array_equal(P.sum(axis=2), np.ones((3, 4))))
check("partition: same seed, other chunking, same partition", np.array_equal(P, Q))
check("partition: another seed, another partition", not np.array_equal(P, R))

# ---- 2. one IST round --------------------------------------------------------
SIZES, N, M, B, LR, J = [5, 6, 4, 3], 2, 6, 3, 0.5, 2
net = ist.Net(SIZES, N, B, LR)
Xl = rng.standard_normal((N, M, SIZES[0])).astype(np.float32)
Yl = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], (N, M))]
W = {l: rng.standard_normal((r, c)).astype(np.float32) * 0.5 for l, r, c in net.layers()}
mu = {l: rng.standard_normal(SIZES[l]).astype(np.float32) * 0.1 for l in (1, 2)}
sd = {l: (1 + rng.random(SIZES[l])).astype(np.float32) for l in (1, 2)}
np.save("Xl.npy", Xl)
np.save("Yl.npy", Yl)
for l in W:
    np.save("W%d.npy" % l, W[l])
for l in mu:
    np.save("mu%d.npy" % l, mu[l])
    np.save("sd%d.npy" % l, sd[l])

offsets = [0, B]
script = ["LOAD Xl FROM 'Xl.npy' CHUNK [1, %d, %d];" % (M, SIZES[0]),
          "LOAD Yl FROM 'Yl.npy' CHUNK [1, %d, %d];" % (M, SIZES[-1])]
script += ist.setup(net, 1)
script += ["LOAD W%d FROM 'W%d.npy';" % (l, l) for l in W]
script += ["LOAD %s%d FROM '%s%d.npy';" % (v, l, v, l) for l in mu for v in ("mu", "sd")]
script += ist.ist_round(net, 5, offsets[:J])
script += ["SAVE %s TO '%s.out.npy';" % (t, t)
           for t in ("P1", "P2", "W1", "W2", "W3", "mu1", "sd1", "mu2", "sd2")]
tradb("\n".join(script))
P1, P2 = np.load("P1.out.npy"), np.load("P2.out.npy")


def members(P):
    """Site s's neurons, in its subnet's order: idx[s][j] = h."""
    return [np.argmax(P[s], axis=1) for s in range(P.shape[0])]


def layer(a, m, s, train):
    """relu of a normalised by running statistics m, s (updated in place
    with the batch's when training)."""
    if train:
        m *= ist.MOM
        m += (1 - ist.MOM) * a.mean(0)
        s *= ist.MOM
        s += (1 - ist.MOM) * np.sqrt(a.var(0) + ist.EPS)
    return np.maximum((a - m) / s, 0)


def sgd_step(w1, w2, w3, m1, s1, m2, s2, x, y, batch_total):
    """One SGD step on float64 copies, in place; statistics constant in
    the backward pass."""
    h1 = layer(x @ w1, m1, s1, True)
    h2 = layer(h1 @ w2, m2, s2, True)
    o = h2 @ w3
    e = np.exp(o - o.max(1, keepdims=True))
    g3 = (e / e.sum(1, keepdims=True) - y) / batch_total
    g2 = (g3 @ w3.T) * (h2 > 0) / s2
    g1 = (g2 @ w2.T) * (h1 > 0) / s1
    w3 -= LR * h2.T @ g3
    w2 -= LR * h1.T @ g2
    w1 -= LR * x.T @ g1


ref = {l: W[l].astype(np.float64) for l in W}
rmu = {l: mu[l].astype(np.float64) for l in mu}
rsd = {l: sd[l].astype(np.float64) for l in sd}
a_, b_ = members(P1), members(P2)
for s in range(N):
    # site s's blocks: W1's columns, W2's block, W3's rows, its statistics
    w1 = ref[1][:, a_[s]].copy()
    w2 = ref[2][np.ix_(a_[s], b_[s])].copy()
    w3 = ref[3][b_[s], :].copy()
    m1, s1 = rmu[1][a_[s]].copy(), rsd[1][a_[s]].copy()
    m2, s2 = rmu[2][b_[s]].copy(), rsd[2][b_[s]].copy()
    for off in offsets[:J]:
        sgd_step(w1, w2, w3, m1, s1, m2, s2, Xl[s, off:off + B].astype(np.float64),
                 Yl[s, off:off + B], B)
    ref[1][:, a_[s]] = w1
    ref[2][np.ix_(a_[s], b_[s])] = w2
    ref[3][b_[s], :] = w3
    rmu[1][a_[s]], rsd[1][a_[s]], rmu[2][b_[s]], rsd[2][b_[s]] = m1, s1, m2, s2

check("ist round: partitions are permutations",
      np.array_equal(P1.sum(axis=(0, 1)), np.ones(SIZES[1])) and
      np.array_equal(P2.sum(axis=(0, 1)), np.ones(SIZES[2])))


def close(name, got, want):
    err = float(np.max(np.abs(got - want)))
    check(name, got.shape == want.shape and err <= 1e-4 * max(1.0, float(np.max(np.abs(want)))),
          "max error %.3g" % err)


for l in W:
    close("ist round: W%d" % l, np.load("W%d.out.npy" % l), ref[l])
    # the round changed the weights: the comparison is not of untouched copies
    check("ist round: W%d trained" % l, np.max(np.abs(ref[l] - W[l])) > 1e-3)
for l in mu:
    close("ist round: mu%d" % l, np.load("mu%d.out.npy" % l), rmu[l])
    close("ist round: sd%d" % l, np.load("sd%d.out.npy" % l), rsd[l])
# a hidden-to-hidden weight whose neurons are on different subnets stays
cross = np.ones((SIZES[1], SIZES[2]), bool)
for s in range(N):
    cross[np.ix_(a_[s], b_[s])] = False
check("ist round: cross-subnet weights of W2 untouched",
      np.array_equal(np.load("W2.out.npy")[cross], W[2][cross]))

# ---- 3. one data-parallel step -------------------------------------------------
script = ["LOAD Xl FROM 'Xl.npy' CHUNK [1, %d, %d];" % (M, SIZES[0]),
          "LOAD Yl FROM 'Yl.npy' CHUNK [1, %d, %d];" % (M, SIZES[-1])]
script += ist.setup(net, 1)
script += ["LOAD W%d FROM 'W%d.npy';" % (l, l) for l in W]
script += ["LOAD %s%d FROM '%s%d.npy';" % (v, l, v, l) for l in mu for v in ("mu", "sd")]
script += ist.dp_steps(net, [B])
script += ["SAVE W%d TO 'W%d.dp.npy';" % (l, l) for l in W]
tradb("\n".join(script))
ref = {l: W[l].astype(np.float64) for l in W}
m1, s1, m2, s2 = (v.astype(np.float64) for v in (mu[1], sd[1], mu[2], sd[2]))
x = Xl[:, B:2 * B].reshape(N * B, -1).astype(np.float64)
y = Yl[:, B:2 * B].reshape(N * B, -1)
sgd_step(ref[1], ref[2], ref[3], m1, s1, m2, s2, x, y, N * B)
for l in W:
    close("dp step: W%d" % l, np.load("W%d.dp.npy" % l), ref[l])

print("ist: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
