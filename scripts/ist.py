#!/usr/bin/python3
"""Independent subnet training (IST) and data-parallel SGD as tradb statements.

The statements that train a fully connected network with ReLU hidden
layers and a softmax output, written in tradb's language: IST (Yuan's
thesis, chapter 2.1) and, as its baseline, data-parallel SGD (the TRA
paper's FFNN step).  Both read the same training data, split into n
shards Xl[s,m,d] / Yl[s,m,c] (s: the site, m: the example within the
shard), and take the same mini-batches, so they differ only in what they
do with the weights:

IST, each round: FILL P<l> PERMUTATION gives every hidden layer's neurons
at random to the n subnets (P<l>[s,j,h] = 1 when neuron h is the j-th of
subnet s: every neuron in exactly one subnet); the weight blocks linking
a subnet's neurons in consecutive layers are cut out as EinSums over P
(the input and output layers are complete in every subnet); J local SGD
steps run on tensors that all carry the label s, so each subnet's step
needs nothing from another's; the blocks are written back through P.

Data parallel, each step: the weights have no label s; the batch of all
n shards goes through the whole network and the gradients are summed
over s and the batch.

Each hidden neuron's input is normalised with a running mean and
standard deviation (momentum MOM over the batches), as the thesis's
2.1.4 does instead of the n^2 rescale; the statistics are treated as
constants in the backward pass.  They travel with their neuron through
P.  For deployment (evaluate), the statistics are recomputed with the
whole network on a calibration subset of the training data, as 2.1.4
prescribes: the subnets' neurons saw only 1/n of their inputs.

The loop over rounds and steps is this program's: tradb's language has
no loop or variables, so the batch offsets and the rounds' seeds are
written into the statements.  Run `scripts/ist.py --help` for a script a
user can pipe into tradb.
"""
import argparse
import sys

import numpy as np

EPS = 1e-5  # added to each variance before its square root
MOM = 0.9   # running statistics: new = MOM * old + (1 - MOM) * batch's


class Net:
    """A network of sizes[0] inputs, hidden layers sizes[1:-1] and
    sizes[-1] classes, trained on n sites with per-site batches of B."""

    def __init__(self, sizes, n, batch, lr):
        self.sizes, self.n, self.batch, self.lr = list(sizes), n, batch, lr
        self.hidden = len(sizes) - 2  # hidden layers 1..hidden
        for h in self.sizes[1:-1]:
            if h % n:
                raise ValueError("hidden layer of %d neurons does not split into %d subnets"
                                 % (h, n))

    def layers(self):
        """Weight layers 1..hidden+1: (l, rows, cols)."""
        return [(l, self.sizes[l - 1], self.sizes[l]) for l in range(1, len(self.sizes))]


def setup(net, seed):
    """Declare the weights (uniform in +-sqrt(6 / (fan_in + fan_out))),
    the running statistics (mean 0, std 1) and the permutations."""
    st = []
    for l, r, c in net.layers():
        a = (6.0 / (r + c)) ** 0.5
        st.append("CREATE TENSOR W%d[%d, %d];" % (l, r, c))
        st.append("FILL W%d UNIFORM(%.9g, %.9g) SEED %d;" % (l, -a, a, seed + l))
    for l in range(1, net.hidden + 1):
        h = net.sizes[l]
        st += ["CREATE TENSOR mu%d[%d];" % (l, h), "FILL mu%d ZEROS;" % l,
               "CREATE TENSOR sd%d[%d];" % (l, h), "FILL sd%d ONES;" % l,
               # one subnet per chunk, so the partitioned blocks can sit
               # on the subnets' own workers
               "CREATE TENSOR P%d[%d, %d, %d] CHUNK [1, %d, %d];"
               % (l, net.n, h // net.n, h, h // net.n, h)]
    return st


def batch(net, offset):
    """This step's mini-batch: examples offset..offset+B of every shard."""
    b = "%d:%d" % (offset, offset + net.batch)
    return ["Xb = Xl[:, %s, :];" % b, "Yb = Yl[:, %s, :];" % b]


def _normalise(l, j, subnets):
    """Hidden layer l's running statistics, updated with the batch's
    inputs A<l>[s,b,j], then H<l> = relu((A<l> - mu) / sd).  subnets:
    IST's per-subnet statistics mu<l>s[s,j] (means over the subnet's
    batch b); else the whole network's mu<l>[j] (means over all the
    batches, s and b)."""
    a = "A%d[s,b,%s]" % (l, j)
    mu, sd = ("mu%ds[s,%s]" % (l, j), "sd%ds[s,%s]" % (l, j)) if subnets else \
        ("mu%d[%s]" % (l, j), "sd%d[%s]" % (l, j))
    inner = "A%d[%s,b2,%s]" % (l, "s" if subnets else "s2", j)  # the batch's mean
    return [
        "%s = %g * %s + %g * MEAN(%s);" % (mu, MOM, mu, 1 - MOM, a),
        "%s = %g * %s + %g * sqrt(MEAN((%s - MEAN(%s)) ^ 2) + %g);"
        % (sd, MOM, sd, 1 - MOM, a, inner, EPS),
        "H%d[s,b,%s] = relu((%s - %s) / %s);" % (l, j, a, mu, sd),
    ]


def _step(net, ist):
    """One SGD step on the batch Xb[s,b,d] / Yb[s,b,c].  IST: on the
    subnets' blocks W<l>s (every tensor carries s; the gradient of a
    subnet is its batch's mean).  Data parallel: on the whole weights
    W<l> (the gradient is the mean over all n batches)."""
    k = net.hidden
    sfx = "s" if ist else ""
    ws = lambda l: "W%d%s" % (l, sfx)
    # a neuron label per layer: d for the input, j1..jk, c for the classes
    lab = ["d"] + ["j%d" % l for l in range(1, k + 1)] + ["c"]
    wlab = lambda l: ("s," if ist else "") + "%s,%s" % (lab[l - 1], lab[l])
    st, prev = [], "Xb"
    for l in range(1, k + 1):
        st.append("A%d[s,b,%s] = SUM(%s[s,b,%s] * %s[%s]);"
                  % (l, lab[l], prev, lab[l - 1], ws(l), wlab(l)))
        st += _normalise(l, lab[l], ist)
        prev = "H%d" % l
    scale = 1.0 / (net.batch if ist else net.batch * net.n)
    st += ["O[s,b,c] = SUM(%s[s,b,%s] * %s[%s]);" % (prev, lab[k], ws(k + 1), wlab(k + 1)),
           "E[s,b,c] = exp(O[s,b,c] - MAX(O[s,b,e]));",
           # dLoss/dO of the mean cross-entropy
           "G%d[s,b,c] = (E[s,b,c] / SUM(E[s,b,e]) - Yb[s,b,c]) * %.9g;" % (k + 1, scale)]
    for l in range(k + 1, 0, -1):
        below = "Xb" if l == 1 else "H%d" % (l - 1)
        if l > 1:  # the error at layer l-1's inputs, through relu and 1/sd
            m = ("s," if ist else "") + lab[l - 1]
            st.append("G%d[s,b,%s] = SUM(G%d[s,b,%s] * %s[%s]) * (H%d[s,b,%s] > 0) / sd%d%s[%s];"
                      % (l - 1, lab[l - 1], l, lab[l], ws(l), wlab(l), l - 1, lab[l - 1],
                         l - 1, sfx, m))
        st.append("%s[%s] = %s[%s] - %.9g * SUM(%s[s,b,%s] * G%d[s,b,%s]);"
                  % (ws(l), wlab(l), ws(l), wlab(l), net.lr, below, lab[l - 1], l, lab[l]))
    return st


def ist_round(net, seed, offsets):
    """One IST round: partition (seeded by seed), one local step per batch
    offset, write back."""
    k = net.hidden
    st = ["FILL P%d PERMUTATION SEED %d;" % (l, seed * 1000 + l) for l in range(1, k + 1)]
    # cut out the blocks: the input layer complete, the hidden ones by P
    st.append("W1s[s,d,j] = SUM(W1[d,h] * P1[s,j,h]);")
    for l in range(2, k + 1):
        st += ["T%d[s,i,h] = SUM(W%d[g,h] * P%d[s,i,g]);" % (l, l, l - 1),
               "W%ds[s,i,j] = SUM(T%d[s,i,h] * P%d[s,j,h]);" % (l, l, l),
               "V%ds[s,i,j] = W%ds[s,i,j];" % (l, l)]  # to write back the change only
    st.append("W%ds[s,i,c] = SUM(W%d[g,c] * P%d[s,i,g]);" % (k + 1, k + 1, k))
    for l in range(1, k + 1):
        st += ["mu%ds[s,j] = SUM(mu%d[h] * P%d[s,j,h]);" % (l, l, l),
               "sd%ds[s,j] = SUM(sd%d[h] * P%d[s,j,h]);" % (l, l, l)]
    for off in offsets:
        st += batch(net, off) + _step(net, True)
    # write back: every neuron is in one subnet, so the blocks of the
    # first and last weights and the statistics cover them whole; a
    # hidden-to-hidden weight belongs to a subnet only when both its
    # neurons do, so only the blocks' change is added
    st.append("W1[d,h] = SUM(W1s[s,d,j] * P1[s,j,h]);")
    for l in range(2, k + 1):
        st += ["T%d[s,g,j] = SUM((W%ds[s,i,j] - V%ds[s,i,j]) * P%d[s,i,g]);" % (l, l, l, l - 1),
               "W%d[g,h] = W%d[g,h] + SUM(T%d[s,g,j] * P%d[s,j,h]);" % (l, l, l, l)]
    st.append("W%d[g,c] = SUM(W%ds[s,i,c] * P%d[s,i,g]);" % (k + 1, k + 1, k))
    for l in range(1, k + 1):
        st += ["mu%d[h] = SUM(mu%ds[s,j] * P%d[s,j,h]);" % (l, l, l),
               "sd%d[h] = SUM(sd%ds[s,j] * P%d[s,j,h]);" % (l, l, l)]
    return st


def dp_steps(net, offsets):
    """Data-parallel SGD: one step of the whole network per offset."""
    st = []
    for off in offsets:
        st += batch(net, off) + _step(net, False)
    return st


def evaluate(net):
    """Deployment: each hidden neuron's mean and std recomputed with the
    whole network on the calibration set Xc, then the test accuracy of
    the network on Xt against the labels yt, into acc[]."""
    st, prev, tprev = [], "Xc", "Xt"
    for l in range(1, net.hidden + 1):
        st += ["C%d[n,h] = SUM(%s[n,d] * W%d[d,h]);" % (l, prev, l),
               "e%d[h] = MEAN(C%d[n,h]);" % (l, l),
               "f%d[h] = sqrt(MEAN((C%d[n,h] - e%d[h]) ^ 2) + %g);" % (l, l, l, EPS),
               "Q%d[n,h] = relu((C%d[n,h] - e%d[h]) / f%d[h]);" % (l, l, l, l),
               "R%d[t,h] = relu((SUM(%s[t,d] * W%d[d,h]) - e%d[h]) / f%d[h]);"
               % (l, tprev, l, l, l)]
        prev, tprev = "Q%d" % l, "R%d" % l
    st += ["Ot[t,c] = SUM(%s[t,h] * W%d[h,c]);" % (tprev, net.hidden + 1),
           "acc[] = MEAN(ARGMAX(Ot[t,c]) == yt[t]);"]
    return st


def split(X, y, test, seed, n):
    """Shuffle by seed, hold out `test` examples, cut the rest into n shards
    of equal size; calibration examples from the training set."""
    rng = np.random.default_rng(seed)
    p = rng.permutation(len(y))
    X, y = X[p].astype(np.float32), y[p]
    classes = int(y.max()) + 1
    Xt, yt, Xtr, ytr = X[:test], y[:test], X[test:], y[test:]
    m = len(ytr) // n
    Y = np.eye(classes, dtype=np.float32)[ytr]
    return {"Xl": Xtr[:n * m].reshape(n, m, -1), "Yl": Y[:n * m].reshape(n, m, -1),
            "Xc": Xtr[:min(512, len(ytr))], "Xt": Xt, "yt": yt.astype(np.float32)}, m


def digits():
    """scikit-learn's digits: 1797 examples of 64 pixels (scaled to [0, 1]),
    10 classes."""
    from sklearn.datasets import load_digits
    d = load_digits()
    return d.data / 16.0, d.target


def main():
    ap = argparse.ArgumentParser(
        description="Print a tradb script that trains a network by IST or data-parallel "
                    "SGD.  It loads Xl.npy, Yl.npy (the shards: n x m x D, n x m x C, "
                    "one-hot), Xc.npy (calibration examples) and Xt.npy, yt.npy (test "
                    "examples and labels) from the current directory, and prints the "
                    "test accuracy after each epoch: scripts/ist.py | ./tradb")
    ap.add_argument("--method", choices=["ist", "dp"], default="ist")
    ap.add_argument("--sizes", default="64,512,512,10", help="layer sizes, input first")
    ap.add_argument("--sites", type=int, default=2, help="n: shards and subnets")
    ap.add_argument("--examples", type=int, help="m: examples per shard")
    ap.add_argument("--batch", type=int, default=32, help="examples per shard and step")
    ap.add_argument("--local-steps", type=int, default=11, help="J: IST steps per round")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--digits", action="store_true",
                    help="first write the files from scikit-learn's digits (360 test "
                    "examples held out by --seed; --examples is then set by --sites)")
    a = ap.parse_args()
    if a.digits:
        X, y = digits()
        data, a.examples = split(X, y, 360, a.seed, a.sites)
        for k, v in data.items():
            np.save(k + ".npy", v)
    if a.examples is None:
        ap.error("--examples (or --digits) is required")
    net = Net([int(x) for x in a.sizes.split(",")], a.sites, a.batch, a.lr)
    print("\n".join(st for st, _ in program(net, a.method, a.examples, a.epochs,
                                            a.local_steps, a.seed)))


def program(net, method, m, epochs_, local_steps, seed):
    """A whole run: load the data, declare the network, then each epoch's
    training (IST rounds of local_steps steps, or data-parallel steps)
    and evaluation.  Each statement is tagged 'setup', 'train', 'eval' or
    'acc' (the PRINT of the accuracy)."""
    out = [(st, "setup") for st in [
        "LOAD Xl FROM 'Xl.npy' CHUNK [1, %d, %d];" % (m, net.sizes[0]),
        "LOAD Yl FROM 'Yl.npy' CHUNK [1, %d, %d];" % (m, net.sizes[-1]),
        "LOAD Xc FROM 'Xc.npy';", "LOAD Xt FROM 'Xt.npy';", "LOAD yt FROM 'yt.npy';"]
           + setup(net, seed)]
    for e, offs in enumerate(epochs(m, net.batch, epochs_)):
        st = []
        if method == "ist":
            for r, i in enumerate(range(0, len(offs), local_steps)):
                st += ist_round(net, seed + 1 + e * 1000 + r, offs[i:i + local_steps])
        else:
            st = dp_steps(net, offs)
        out += [(x, "train") for x in st] + [(x, "eval") for x in evaluate(net)]
        out.append(("PRINT acc;", "acc"))
    return out


def epochs(m, b, count):
    """The batch offsets of each epoch: the shard in order, m // b batches."""
    return [[i * b for i in range(m // b)] for _ in range(count)]


if __name__ == "__main__":
    sys.exit(main())
