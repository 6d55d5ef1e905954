#!/usr/bin/env python3
"""scripts/bench_opt.py - does tradb's optimizer choose well, and does it
know how long its plans take?  The TRA paper's experiments (its Tables
3-4, 5-6 and 9), the statements whose speed depended on how their inputs
were stored, and matrix chains, scaled to this machine, on 4 local
workers (the paper's smallest clusters have 4-5 machines):

  matmul    C[i,j] = A[i,k] * B[k,j] in Table 3's three regimes: general
            (I = J = K = 2048), a common large dimension (K = 32768,
            I = J = 512), two large dimensions (I = J = 4096, K = 512);
            a general product stored as one chunk per matrix (I = J = K =
            3072); a projection P[n,e] = X[n,d] * M[d,e] (512 x 4096 by
            4096 x 2048); a dense layer tanh(SUM(X[n,d] * W[d,h])) (512 x
            16384 by 16384 x 64).
  nn        nearest neighbour in a Riemannian metric (section 6.2), one
            block of four statements, on an N-heavy ("many points") and a
            D-heavy ("many features") data set.
  ffnn      one SGD iteration of a two-layer FFNN (section 6.3) as one
            block, on a speech-like shape (few features, wide hidden
            layer, large batch) and an extreme-classification shape (huge
            input and output, narrow hidden layer).
  chains    products of 3 and 4 matrices of mixed shapes (EinDecomp's
            experiment 1), written as one statement and hand-split into
            pairwise statements in every order.

A benchmark must not set up its input by the answer it expects: every case
runs under each of the declared chunkings that make sense for its shapes
(every tensor in row blocks or in column blocks, one per worker; in square
tiles; as one chunk; for a product, both operands cut on the summed
label), and the optimizer chooses for each, its layout included (`SET
layout = auto`, the default).  For each chunking the report gives the
chosen plan, its predicted and measured seconds and transfer, and, timed
the same way, the cheapest alternative of each other plan family (matmul:
BMM, CMM, RMM; the blocks: the cheapest listed plan of the other regime),
the statement as a user runs it (no PLAN named: the chosen plan, placed
as tradb places it), and the plan `SET layout = declared` runs (each node
in its stored operands' chunking, as tradb did before it chose layouts),
medians of --reps runs interleaved in an order that rotates, in three
sessions per chunking with the chunkings taking turns.  Which plan
the paper would pick is shown beside it; neither is asserted.

The summary: for each statement, its time as run under every chunking
(how much the storage still matters: the slowest over the fastest); for
each chain, the one statement against its fastest hand-split form; and how
well the seconds were predicted: predicted over measured for every run,
whether the plans of each case were ranked as they measured, and, of the pairs of
plans of one case whose times differ by more than the noise between runs
(10%), how many the prediction orders as they measured.  The cost weights
are the shipped defaults, or with --calibrate those CALIBRATE fits in each
case's database before its set-up (about 3 s each).  The one
check that fails the run: the measured transfer of every run equals the
prediction (the executor moves exactly what the cost model counted).

Usage: scripts/bench_opt.py [--tradb ./tradb] [--reps 3] [--quick]
                            [--only matmul|nn|ffnn|chains] [--case TEXT]
                            [--calibrate]
Writes the report to stdout (markdown) and exits 1 if a check fails.
"""
import argparse
import itertools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

WORKERS = 4
fails = []
summary = []   # (case, chunking, chosen, chosen s, fastest, fastest s, chosen is fastest)
spread = {}    # case -> {chunking: (auto layout as run s, declared s)}
predicted = []  # (case, chunking, plan, predicted s, measured s)
ranked = []    # (case, chunking, ranked as measured, plans)
pairs = []     # (case, chunking, pairs ordered as measured, pairs measured apart)
PAIR_GAP = 1.10  # two plans "measured apart": the slower over 1.10x the faster
CALIBRATE = False
chained = []   # (chain, one statement s, best split, best split s)


def run(tradb, db, script):
    if CALIBRATE and not os.path.exists(db):
        # a new database: fit the cost weights to these workers first, as
        # a user of a cluster would
        script = "CALIBRATE;\n" + script
    p = subprocess.run([tradb, "--bail", "--local-workers", str(WORKERS), db], input=script,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("tradb failed:\n" + script + "\n" + p.stderr)
    return p.stdout


def objs(out):
    """The JSON objects tradb printed, one per line."""
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def family(name):
    return name.split("[")[0].split(" ")[0]


def check(ok, what):
    print(f"- {'ok' if ok else 'FAILED'}: {what}")
    if not ok:
        fails.append(what)


def chunkings(shapes, tile, first=None, summed=None):
    """{name: {tensor: chunk}}: every tensor in row blocks (its first
    dimension split in WORKERS), in column blocks (its last), in square
    TILE x TILE tiles, or as one chunk; vectors follow the columns.  With
    SUMMED ({tensor: dimension}), also each tensor cut on the summed label.
    A chunking that gives the same chunks as an earlier one is left out;
    FIRST, when given, is listed first."""
    def rows(s):
        return (math.ceil(s[0] / WORKERS),) + s[1:] if len(s) > 1 else s

    def cols(s):
        return s[:-1] + (math.ceil(s[-1] / WORKERS),)

    def tiles(s):
        return tuple(min(tile, x) for x in s)

    ways = [("row blocks", lambda n, s: rows(s)), ("column blocks", lambda n, s: cols(s)),
            (f"square tiles {tile}", lambda n, s: tiles(s)), ("one chunk", lambda n, s: s)]
    if summed:
        ways.append(("cut on the summed label", lambda n, s: tuple(
            math.ceil(x / WORKERS) if d == summed[n] else x for d, x in enumerate(s))))
    if first:
        ways.sort(key=lambda w: w[0] != first)
    out = {}
    for name, f in ways:
        c = {n: f(n, tuple(s)) for n, s in shapes.items()}
        if c not in out.values():
            out[name] = c
    return out


def setup(shapes, chunks, fills):
    return "".join(f"CREATE TENSOR {n}[{','.join(map(str, s))}] CHUNK "
                   f"[{','.join(map(str, chunks[n]))}];\n" for n, s in shapes.items()) + \
        "".join(f"FILL {n} {f};\n" for n, f in fills.items())


def cell(plan):
    """PLAN as a markdown table cell (a block's plan names hold '|')."""
    return "`" + plan.replace("|", "\\|") + "`"


def chunk_text(chunks):
    return "; ".join(f"{n} {'x'.join(map(str, c))}" for n, c in chunks.items())


DECLARED = "declared layout"
AS_RUN = "auto layout, as run"


def measure(tradb, db, prefix, stmt, plans, reps, rot):
    """Run PREFIX + EXPLAIN ANALYZE (FORMAT JSON, PLAN p) STMT for every
    plan p, the statement as a user runs it (no PLAN: the layout, plan and
    placement tradb chooses), and the plan the declared layout chooses,
    REPS times interleaved, in one session, after a run not counted.
    Each run starts with its SET
    layout, and the order rotates from one repetition to the next (from
    ROT on), so that no run always follows the same one (a statement run
    straight after another measured up to 1.4x slower than after a SET, on
    the same plan: 0.014 s against 0.011 s for the dense layer in row
    blocks).  Returns {run: [seconds]}, {run: (measured floats, predicted
    floats, predicted s, name run)} and whether every run moved what was
    predicted."""
    texts = [f"SET layout = auto;\n{prefix}EXPLAIN ANALYZE (FORMAT JSON, PLAN '{pn}') {stmt}\n"
             for pn in plans]
    texts.append(f"SET layout = auto;\n{prefix}EXPLAIN ANALYZE (FORMAT JSON) {stmt}\n")
    texts.append(f"SET layout = declared;\n{prefix}EXPLAIN ANALYZE (FORMAT JSON) {stmt}\n")
    runs = plans + [AS_RUN, DECLARED]
    # a first run, not counted: the session's start-up is not any plan's
    script, order = texts[-2], [None]
    for rep in range(rot, rot + reps):
        for i in range(len(runs)):
            j = (i + rep) % len(runs)
            script += texts[j]
            order.append(runs[j])
    script += "SET layout = auto;\n"
    times, moved, exact = {}, {}, True
    for r, pn in zip(objs(run(tradb, db, script)), order):
        exact &= r["measured_transfer_floats"] == r["predicted_transfer_floats"]
        if pn is None:
            continue
        times.setdefault(pn, []).append(r["elapsed_s"])
        moved[pn] = (r["measured_transfer_floats"], r["predicted_transfer_floats"],
                     r["predicted_s"], r["chosen"]["name"])
    return times, moved, exact


ROUNDS = 3


def measure_all(a, tradb, jobs):
    """Measure every job (db, prefix, stmt, plans: one case under one
    chunking) --reps times, in up to ROUNDS sessions each, the jobs taking
    turns round by round: a burst of load on this shared machine then
    falls on every chunking alike, not on the one measured during it (one
    run of the dense layer measured its cut-on-the-summed-label chunking
    at 0.014 s, the next two at 0.009 s).  Returns, per job, {run: (median
    s, measured floats, predicted floats, predicted s, name run)} and
    whether every run moved what was predicted."""
    rounds = min(ROUNDS, a.reps)
    times = [{} for _ in jobs]
    moved = [{} for _ in jobs]
    exact = [True for _ in jobs]
    done = 0
    for r in range(rounds):
        reps = a.reps * (r + 1) // rounds - done
        for j, (db, prefix, stmt, plans) in enumerate(jobs):
            t, mv, ok = measure(tradb, db, prefix, stmt, plans, reps, done)
            for pn, v in t.items():
                times[j].setdefault(pn, []).extend(v)
            moved[j].update(mv)
            exact[j] &= ok
        done += reps
    return [({pn: (statistics.median(times[j][pn]),) + moved[j][pn] for pn in times[j]}, exact[j])
            for j in range(len(jobs))]


def report(case, cname, chunks, chosen, res, expect=None, regime=None, short=None):
    """The table of one case under one chunking, and its summary rows
    (SHORT: a block plan's name for the summary)."""
    opt = {pn: v for pn, v in res.items() if pn not in (DECLARED, AS_RUN)}
    fastest = min(opt, key=lambda pn: opt[pn][0])
    print(f"#### {cname}: {chunk_text(chunks)}\n")
    print("| plan | predicted s | measured s | predicted floats | measured floats | |")
    print("|---|---:|---:|---:|---:|---|")
    for pn, (t, meas, pred, pred_s, ran) in res.items():
        mark = ", ".join(x for x, on in (("chosen", pn == chosen), ("fastest", pn == fastest)) if on)
        reg = f" ({regime(ran)})" if regime else ""
        name = f"{pn}: {cell(ran)}" if pn in (DECLARED, AS_RUN) else cell(pn)
        print(f"| {name}{reg} | {pred_s:.3g} | {t:.3f} | {pred:.3g} | {meas:.3g} | {mark} |")
        predicted.append((case, cname, pn, pred_s, t))
    print()
    t_c, t_f = opt[chosen][0], opt[fastest][0]
    line = (f"chosen plan the fastest measured: {'yes' if chosen == fastest else 'no'}"
            f" ({t_c:.3f} s, {t_c / t_f:.2f}x the fastest; the statement as run "
            f"{res[AS_RUN][0]:.3f} s; the declared layout's plan {res[DECLARED][0]:.3f} s)")
    if expect:
        line += f"; the paper's choice for this shape: {expect}, chosen: {regime(chosen)}"
    print(f"- {line}\n")
    short = short or (lambda pn: pn)
    summary.append((case, cname, short(chosen), t_c, short(fastest), t_f, chosen == fastest))
    spread.setdefault(case, {})[cname] = (res[AS_RUN][0], res[DECLARED][0])
    by_pred = sorted(opt, key=lambda pn: opt[pn][3])
    by_meas = sorted(opt, key=lambda pn: opt[pn][0])
    ranked.append((case, cname, by_pred == by_meas, len(opt)))
    # plans whose times differ by more than the noise between runs: does
    # the prediction order them as they measured?
    apart = [(x, y) for x, y in itertools.combinations(opt, 2)
             if max(opt[x][0], opt[y][0]) > PAIR_GAP * min(opt[x][0], opt[y][0])]
    agree = sum(1 for x, y in apart if (opt[x][0] < opt[y][0]) == (opt[x][3] < opt[y][3]))
    pairs.append((case, cname, agree, len(apart)))


MATMUL = "C[i,j] = A[i,k] * B[k,j];"


# the products: name, I, J, K, tile, the chunking listed first, statement
PRODUCTS = [("general", 2048, 2048, 2048, 512, None, MATMUL),
            ("common large dim", 512, 512, 32768, 512, None, MATMUL),
            ("two large dims", 4096, 4096, 512, 512, None, MATMUL),
            ("single-chunk 3072", 3072, 3072, 3072, 768, "one chunk", MATMUL),
            ("projection X M", 512, 2048, 4096, 512, None, MATMUL),
            ("dense layer tanh(X W)", 512, 64, 16384, 512, None,
             "C[i,j] = tanh(SUM(A[i,k] * B[k,j]));")]


def matmul(a, tradb, tmp):
    print("## Products (TRA paper Table 3 regimes, and shapes the storage used to decide; "
          "4 local workers)\n")
    cases = PRODUCTS
    if a.quick:
        cases = [(n, i // 2, j // 2, k // 2, t // 2, f, s) for n, i, j, k, t, f, s in cases]
    cases = [c for c in cases if a.case is None or a.case in c[0]]
    for name, I, J, K, tile, first, stmt in cases:
        print(f"### {name}: I={I} J={J} K={K}: `{stmt}`\n")
        shapes = {"A": (I, K), "B": (K, J)}
        preds, jobs, chosen = {}, [], {}
        ways = chunkings(shapes, tile, first, {"A": 1, "B": 0})
        for cname, chunks in ways.items():
            db = os.path.join(tmp, f"mm_{name}_{cname}".replace(" ", "_").replace(",", ""))
            run(tradb, db, setup(shapes, chunks, {"A": "UNIFORM(-1, 1) SEED 1",
                                                  "B": "UNIFORM(-1, 1) SEED 2"}))
            ex = objs(run(tradb, db, f"EXPLAIN (FORMAT JSON) {stmt}\n"))[0]
            best = {}
            for alt in ex["alternatives"]:  # cheapest of each family, in cost order
                best.setdefault(family(alt["name"]), alt)
            chosen[cname] = ex["chosen"]["name"]
            plans = [chosen[cname]] + [best[f]["name"] for f in ("BMM", "CMM", "RMM")
                                       if f in best and best[f]["name"] != chosen[cname]]
            preds[cname] = {f: alt["predicted_transfer_floats"] for f, alt in best.items()}
            jobs.append((db, "", stmt, plans))
        for (cname, chunks), job, (res, exact) in zip(ways.items(), jobs, measure_all(a, tradb, jobs)):
            report(f"{name}", cname, chunks, chosen[cname], res)
            check(exact, f"{name}, {cname}: measured transfer equals predicted in every run")
            print()
            shutil.rmtree(job[0], ignore_errors=True)
        # Table 4's ranking, as an observation: CMM cheapest with a common
        # large dimension, dearest with two large dimensions.
        for cname, p in preds.items():
            order = " < ".join(f for f in sorted(p, key=p.get) if f in ("BMM", "CMM", "RMM"))
            print(f"- {cname}: predicted transfer (floats), fewest first: {order}")
        print()


NN = """BEGIN;
diff[n,d] = X[n,d] - q[d];
proj[n,e] = diff[n,d] * M[d,e];
dist[n] = proj[n,e] * diff[n,e];
best[] = MIN(dist[n]);
"""


def node(plan, out):
    """The part of a block's plan name for output OUT."""
    for part in plan.split(" | "):
        if part.startswith(out + ": "):
            return part[len(out) + 2:]
    return ""


def nn_regime(plan):
    # horizontal: the points label n partitions the projection; vertical:
    # the feature label d (aggregated) is split, partials combined
    p = node(plan, "proj")
    return "vertical" if p.startswith("CMM") or "2-phase" in p else "horizontal"


def block_job(tradb, db, text, regime):
    """Plan the block TEXT: its job for measure_all (the chosen plan and
    the cheapest listed plan of the other regime), and the number of
    alternatives listed."""
    ex = objs(run(tradb, db, text + "EXPLAIN (FORMAT JSON) COMMIT;\nROLLBACK;\n"))[0]
    chosen = ex["chosen"]["name"]
    other = next((alt["name"] for alt in ex["alternatives"]
                  if regime(alt["name"]) != regime(chosen)), None)
    return (db, text, "COMMIT;", [chosen] + ([other] if other else [])), len(ex["alternatives"])


def blocks(a, tradb, case, ways, dbs, text, regime, expect, key):
    """Measure the block TEXT under every chunking (WAYS, set up in DBS)
    and report each."""
    planned = [block_job(tradb, db, text, regime) for db in dbs]
    jobs = [j for j, _ in planned]
    for (cname, chunks), (job, nalt), (res, exact) in zip(ways.items(), planned,
                                                          measure_all(a, tradb, jobs)):
        report(case, cname, chunks, job[3][0], res, expect, regime,
               lambda pn: f"{regime(pn)}: {key}: {node(pn, key)}")
        if len(job[3]) == 1:
            print(f"- no plan of the other regime among the {nalt} alternatives listed\n")
        check(exact, f"{case}, {cname}: measured transfer equals predicted in every run")
        print()
        shutil.rmtree(job[0], ignore_errors=True)


def nn(a, tradb, tmp):
    print("## Nearest neighbour in a Riemannian metric (TRA paper 6.2, Tables 5-6)\n")
    sets = [("many points (N-heavy)", 32768, 256, 256, "horizontal"),
            ("many features (D-heavy)", 512, 4096, 512, "vertical")]
    for name, N, D, tile, expect in sets:
        print(f"### {name}: N={N} D={D}\n")
        shapes = {"X": (N, D), "q": (D,), "M": (D, D)}
        ways, dbs = chunkings(shapes, tile), []
        for cname, chunks in ways.items():
            dbs.append(os.path.join(tmp, f"nn_{N}_{cname}".replace(" ", "_")))
            run(tradb, dbs[-1], setup(shapes, chunks, {"X": "UNIFORM(-1, 1) SEED 3",
                                                       "q": "UNIFORM(-1, 1) SEED 4",
                                                       "M": "UNIFORM(0, 1) SEED 5"}))
        blocks(a, tradb, f"nn, {name}", ways, dbs, NN, nn_regime, expect, "proj")


# the new weights under new names: every run then starts from the same
# inputs where they were stored (updated in place, the weights moved to
# wherever the plan run last wrote them, and a plan named from the first
# EXPLAIN could no longer be reached from there)
FFNN = """BEGIN;
H[n,h] = sigmoid(SUM(X[n,d] * W1[d,h]));
O[n,l] = H[n,h] * W2[h,l];
G[n,l] = O[n,l] - Y[n,l];
dH[n,h] = SUM(G[n,l] * W2[h,l]) * H[n,h] * (1 - H[n,h]);
W2n[h,l] = W2[h,l] - 0.001 * SUM(H[n,h] * G[n,l]);
W1n[d,h] = W1[d,h] - 0.001 * SUM(X[n,d] * dH[n,h]);
"""


def ffnn_regime(plan):
    first = plan.split(" | ")[0]
    return "data parallel" if " by n" in first or "[n" in first else "model parallel"


def ffnn(a, tradb, tmp):
    print("## One SGD iteration of a two-layer FFNN (TRA paper 6.3, Table 9)\n")
    shapes_ = [("speech-like", 8192, 256, 2048, 16, 512, "data parallel"),
               ("extreme classification", 512, 16384, 64, 16384, 2048, "model parallel")]
    for name, N, D, Hh, L, tile, expect in shapes_:
        print(f"### {name}: N={N} D={D} H={Hh} L={L}\n")
        shapes = {"X": (N, D), "Y": (N, L), "W1": (D, Hh), "W2": (Hh, L)}
        ways, dbs = chunkings(shapes, tile), []
        for cname, chunks in ways.items():
            dbs.append(os.path.join(tmp, f"ffnn_{name[:6]}_{cname}".replace(" ", "_")))
            run(tradb, dbs[-1], setup(shapes, chunks, {"X": "UNIFORM(0, 1) SEED 6",
                                                       "Y": "UNIFORM(0, 1) SEED 7",
                                                       "W1": "NORMAL(0, 0.05) SEED 8",
                                                       "W2": "NORMAL(0, 0.05) SEED 9"}))
        blocks(a, tradb, f"ffnn, {name}", ways, dbs, FFNN, ffnn_regime, expect, "H")


def orders(names):
    """Every full parenthesisation of the product of NAMES: (its text,
    its steps), a step (left, right) an operand's index or an earlier
    step's output "T<k>"; (A (B C)) -> [(1, 2), (0, "T0")]."""
    def trees(lo, hi):
        if hi - lo == 1:
            yield lo
            return
        for mid in range(lo + 1, hi):
            for left in trees(lo, mid):
                for right in trees(mid, hi):
                    yield (left, right)

    def text(t):
        return names[t] if isinstance(t, int) else f"({text(t[0])} {text(t[1])})"

    for t in trees(0, len(names)):
        steps = []

        def emit(t):
            if isinstance(t, int):
                return t
            left, right = emit(t[0]), emit(t[1])
            steps.append((left, right))
            return "T%d" % (len(steps) - 1)
        emit(t)
        yield text(t), steps


def chains(a, tradb, tmp):
    print("## Matrix chains: one statement against every hand-split order (EinDecomp "
          "experiment 1, mixed shapes, 4 local workers)\n")
    n, m = (2048, 512) if a.quick else (4096, 1024)
    cases = [("3 operands", [(n, m), (m, n), (n, m)]),
             ("4 operands", [(m, n), (n, m), (m, n), (n, m)]),
             ("4 operands, a thin one", [(n, m), (m, n), (n, 64), (64, n)])]
    labels = "ijklm"
    for name, sh in cases:
        mats = "ABCD"[:len(sh)]
        shapes = dict(zip(mats, sh))
        out = f"O[i,{labels[len(sh)]}]"
        one = f"{out} = " + " * ".join(f"{x}[{labels[i]},{labels[i + 1]}]"
                                       for i, x in enumerate(mats)) + ";"
        print(f"### {name}: {' * '.join('%dx%d' % s for s in sh)}\n")
        forms = {"one statement": [one]}
        for text, steps in orders(list(mats)):
            lab = {x: (labels[i], labels[i + 1]) for i, x in enumerate(mats)}
            stmts = []
            for k, (l, r) in enumerate(steps):
                ln = mats[l] if isinstance(l, int) else l
                rn = mats[r] if isinstance(r, int) else r
                o = "O" if k == len(steps) - 1 else f"T{k}"
                lab[o] = (lab[ln][0], lab[rn][1])
                stmts.append(f"{o}[{lab[o][0]},{lab[o][1]}] = {ln}[{lab[ln][0]},{lab[ln][1]}]"
                             f" * {rn}[{lab[rn][0]},{lab[rn][1]}];")
            forms[f"split {text}"] = stmts
        for cname, chunks in list(chunkings(shapes, 512).items())[:2]:
            db = os.path.join(tmp, f"chain_{len(sh)}_{cname}".replace(" ", "_"))
            fills = {x: f"UNIFORM(-1, 1) SEED {i + 1}" for i, x in enumerate(mats)}
            run(tradb, db, setup(shapes, chunks, fills))
            script = ""
            for _ in range(a.reps):
                for f, stmts in forms.items():
                    script += "".join(f"EXPLAIN ANALYZE (FORMAT JSON) {s}\n" for s in stmts)
            res = iter(objs(run(tradb, db, script)))
            times = {f: [] for f in forms}
            for _ in range(a.reps):
                for f, stmts in forms.items():
                    times[f].append(sum(next(res)["elapsed_s"] for _ in stmts))
            med = {f: statistics.median(t) for f, t in times.items()}
            best = min((f for f in forms if f != "one statement"), key=med.get)
            print(f"#### {cname}: {chunk_text(chunks)}\n")
            print("| form | statements | median s |")
            print("|---|---|---:|")
            for f, stmts in forms.items():
                print(f"| {f}{' (fastest split)' if f == best else ''} | "
                      f"{'<br>'.join('`%s`' % s for s in stmts)} | {med[f]:.3f} |")
            r = med["one statement"] / med[best]
            print(f"\n- one statement {med['one statement']:.3f} s, the fastest hand-split "
                  f"form {med[best]:.3f} s: {r:.2f}x\n")
            chained.append((f"{name}, {cname}", med["one statement"], best, med[best]))
            shutil.rmtree(db, ignore_errors=True)


def summarise():
    print("## Summary: was the chosen plan the fastest measured?\n")
    print("| case | chunking | chosen plan | chosen s | fastest measured | fastest s |")
    print("|---|---|---|---:|---|---:|")
    for case, cname, chosen, t_c, fastest, t_f, same in summary:
        print(f"| {case} | {cname} | {cell(chosen)} | {t_c:.3f} | "
              f"{'the chosen' if same else cell(fastest)} | {t_f:.3f} |")
    n_fast = sum(1 for s in summary if s[6])
    n_near = sum(1 for s in summary if s[3] <= 1.15 * s[5])
    print(f"\nThe chosen plan was the fastest measured in {n_fast} of {len(summary)} cases, and"
          f" within 1.15x of it in {n_near}.\n")
    if spread:
        print("## Summary: the same statement under every declared chunking\n")
        print("| case | chunkings | auto layout, as run: fastest s | slowest s | slowest / fastest | "
              "declared layout: slowest / fastest |")
        print("|---|---:|---:|---:|---:|---:|")
        for case, by in spread.items():
            auto = [v[0] for v in by.values()]
            decl = [v[1] for v in by.values()]
            print(f"| {case} | {len(by)} | {min(auto):.3f} | {max(auto):.3f} | "
                  f"{max(auto) / min(auto):.2f} | {max(decl) / min(decl):.2f} |")
        print()
    if chained:
        print("## Summary: chains as one statement\n")
        print("| chain, chunking | one statement s | fastest hand-split | its s | ratio |")
        print("|---|---:|---|---:|---:|")
        for c, t1, best, tb in chained:
            print(f"| {c} | {t1:.3f} | {best} | {tb:.3f} | {t1 / tb:.2f} |")
        print()
    if predicted:
        r = [p / m for _, _, _, p, m in predicted if m > 0]
        within = sum(1 for x in r if 0.5 <= x <= 2)
        print("## Summary: predicted against measured seconds\n")
        print(f"Over {len(r)} runs (median of --reps each), predicted / measured: median "
              f"{statistics.median(r):.2f}, range {min(r):.2f} to {max(r):.2f}; within 2x in "
              f"{within} of {len(r)}.  The plans of a case ranked as they measured in "
              f"{sum(1 for x in ranked if x[2])} of {len(ranked)} cases "
              f"({sum(1 for x in ranked if x[3] > 1)} with more than one plan).  Of the "
              f"{sum(x[3] for x in pairs)} pairs of plans of one case that measured more than "
              f"{PAIR_GAP:.2f}x apart, the prediction ordered "
              f"{sum(x[2] for x in pairs)} as they measured.\n")
        print("| case | chunking | plan | predicted s | measured s | ratio |")
        print("|---|---|---|---:|---:|---:|")
        for case, cname, pn, p, m in predicted:
            print(f"| {case} | {cname} | {cell(pn)} | {p:.3g} | {m:.3f} | {p / m:.2f} |")
        print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tradb", default="./tradb")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="products and chains at half size")
    ap.add_argument("--only", choices=["matmul", "nn", "ffnn", "chains"])
    ap.add_argument("--case", metavar="TEXT",
                    help="only the products whose name holds TEXT (e.g. 'dense'); no other group")
    ap.add_argument("--calibrate", action="store_true",
                    help="run CALIBRATE in each case's new database before its set-up")
    a = ap.parse_args()
    global CALIBRATE
    CALIBRATE = a.calibrate
    if a.reps < 1:
        ap.error("--reps must be positive")
    if a.case is not None and a.only not in (None, "matmul"):
        ap.error("--case picks products: it goes with --only matmul or no --only")
    if a.case is not None and not any(a.case in c[0] for c in PRODUCTS):
        ap.error("--case: no product's name holds '%s'; the products: %s"
                 % (a.case, ", ".join("'%s'" % c[0] for c in PRODUCTS)))
    tmp = tempfile.mkdtemp(prefix="tradb-opt-", dir=os.environ.get("TMPDIR", "/tmp"))
    try:
        for f in (matmul, nn, ffnn, chains):
            if (not a.only or a.only == f.__name__) and (a.case is None or f is matmul):
                f(a, a.tradb, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summarise()
    print(f"**{len(fails)} check(s) failed**" if fails else "**all checks passed**")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
