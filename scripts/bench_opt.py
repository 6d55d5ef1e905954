#!/usr/bin/env python3
"""scripts/bench_opt.py - does tradb's optimizer pick the plans the TRA paper
says are right (its Tables 3-4, 5-6 and 9), scaled to this machine?

On 4 local workers (the paper's smallest clusters have 4-5 machines):

  matmul    C[i,j] = A[i,k] * B[k,j] in Table 3's three regimes: general
            (I = J = K = 2048), a common large dimension (K = 32768,
            I = J = 512), two large dimensions (I = J = 4096, K = 512).
            For each: the chosen plan and every alternative's predicted
            transfer (EXPLAIN (FORMAT JSON)); then the chosen plan and the
            cheapest BMM, CMM and RMM run with EXPLAIN ANALYZE (FORMAT JSON,
            PLAN 'name'), medians of --reps runs, measured transfer checked
            against the prediction.
  nn        nearest neighbour in a Riemannian metric (section 6.2), one
            block of four statements, on an N-heavy ("many points") and a
            D-heavy ("many features") data set: horizontal (partition the
            points) or vertical (partition the features)?
  ffnn      one SGD iteration of a two-layer FFNN (section 6.3) as one
            block, on a speech-like shape (few features, wide hidden
            layer, large batch) and an extreme-classification shape (huge
            input and output, narrow hidden layer): data parallel
            (partition the batch) or model parallel (partition the model)?

Usage: scripts/bench_opt.py [--tradb ./tradb] [--reps 3] [--quick]
Writes the report to stdout (markdown) and exits 1 if a check fails.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile

def run(tradb, db, script, workers):
    p = subprocess.run([tradb, "--bail", "--local-workers", str(workers), db], input=script,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("tradb failed:\n" + script + "\n" + p.stderr)
    return p.stdout

def objs(out):
    """The JSON objects tradb printed, one per line."""
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]

def family(name):
    return name.split("[")[0].split(" ")[0]

fails = []
def check(ok, what):
    print(f"- {'ok' if ok else 'FAILED'}: {what}")
    if not ok:
        fails.append(what)

def matmul(a, tradb, tmp):
    print("## Matrix multiply (TRA paper Table 3 regimes, 4 local workers)\n")
    regimes = [("general", 2048, 2048, 2048, (512, 512), (512, 512)),
               ("common large dim", 512, 512, 32768, (512, 4096), (4096, 512)),
               ("two large dims", 4096, 4096, 512, (1024, 512), (512, 1024))]
    if a.quick:
        regimes = [(n, i // 2, j // 2, k // 2, (c1[0] // 2, c1[1] // 2), (c2[0] // 2, c2[1] // 2))
                   for n, i, j, k, c1, c2 in regimes]
    chosen_names = []
    rows = []
    for name, I, J, K, ca, cb in regimes:
        db = os.path.join(tmp, "mm_" + name.replace(" ", "_"))
        setup = (f"CREATE TENSOR A[{I},{K}] CHUNK [{ca[0]},{ca[1]}];\n"
                 f"CREATE TENSOR B[{K},{J}] CHUNK [{cb[0]},{cb[1]}];\n"
                 "FILL A UNIFORM(-1, 1) SEED 1;\nFILL B UNIFORM(-1, 1) SEED 2;\n")
        run(tradb, db, setup, 4)
        ex = objs(run(tradb, db, "EXPLAIN (FORMAT JSON) C[i,j] = A[i,k] * B[k,j];\n", 4))[0]
        alts = ex["alternatives"]
        best = {}
        for alt in alts:  # cheapest of each family, in cost order
            best.setdefault(family(alt["name"]), alt)
        plans = [ex["chosen"]["name"]] + [best[f]["name"] for f in ("BMM", "CMM", "RMM")
                                           if f in best and best[f]["name"] != ex["chosen"]["name"]]
        script = ""
        for _ in range(a.reps):
            for pn in plans:
                script += f"EXPLAIN ANALYZE (FORMAT JSON, PLAN '{pn}') C[i,j] = A[i,k] * B[k,j];\n"
        res = objs(run(tradb, db, script, 4))
        times, exact = {}, True
        for r in res:
            times.setdefault(r["chosen"]["name"], []).append(r["elapsed_s"])
            exact &= r["measured_transfer_floats"] == r["predicted_transfer_floats"]
        med = {pn: statistics.median(times[pn]) for pn in plans}
        fastest = min(med.values())
        chosen = ex["chosen"]["name"]
        chosen_names.append(family(chosen))
        pred = {family(alt["name"]): alt["predicted_transfer_floats"] for alt in reversed(alts)}
        rows.append((name, I, J, K, chosen, pred, med, fastest))
        print(f"### {name}: I={I} J={J} K={K}, chunks A {ca} B {cb}\n")
        print("| plan | predicted floats | median s | |")
        print("|---|---:|---:|---|")
        for pn in plans:
            pf = next(x["predicted_transfer_floats"] for x in alts if x["name"] == pn)
            print(f"| {pn} | {pf:.3g} | {med[pn]:.3f} | {'chosen' if pn == chosen else ''} |")
        print()
        check(exact, f"{name}: measured transfer equals predicted in every run")
        check(med[chosen] <= 1.15 * fastest,
              f"{name}: chosen {chosen} {med[chosen]:.3f} s within 1.15x of the fastest {fastest:.3f} s")
        print()
    # Table 4's ranking: common large dim -> CMM cheapest; two large dims ->
    # BMM/RMM cheaper than CMM.
    _, _, _, _, _, p_common, _, _ = rows[1]
    _, _, _, _, _, p_two, _, _ = rows[2]
    check(p_common.get("CMM", 1e99) < min(p_common.get("BMM", 1e99), p_common.get("RMM", 1e99)),
          "common large dim: CMM predicted cheapest (Table 4)")
    check(min(p_two.get("BMM", 1e99), p_two.get("RMM", 1e99)) < p_two.get("CMM", 1e99),
          "two large dims: BMM/RMM predicted cheaper than CMM (Table 4)")
    check(len(set(chosen_names)) > 1, f"the regimes do not all get the same plan: {chosen_names}")
    print()

NN = """BEGIN;
diff[n,d] = X[n,d] - q[d];
proj[n,e] = diff[n,d] * M[d,e];
dist[n] = proj[n,e] * diff[n,e];
best[] = MIN(dist[n]);
"""

def nn(a, tradb, tmp):
    print("## Nearest neighbour in a Riemannian metric (TRA paper 6.2, Tables 5-6)\n")
    sets = [("many points (N-heavy)", 32768, 256, (8192, 256), (256, 256), "horizontal"),
            ("many features (D-heavy)", 512, 4096, (512, 1024), (1024, 4096), "vertical")]
    for name, N, D, cx, cm, want in sets:
        db = os.path.join(tmp, "nn_" + want)
        setup = (f"CREATE TENSOR X[{N},{D}] CHUNK [{cx[0]},{cx[1]}];\nCREATE TENSOR q[{D}];\n"
                 f"CREATE TENSOR M[{D},{D}] CHUNK [{cm[0]},{cm[1]}];\n"
                 "FILL X UNIFORM(-1, 1) SEED 3;\nFILL q UNIFORM(-1, 1) SEED 4;\nFILL M UNIFORM(0, 1) SEED 5;\n")
        run(tradb, db, setup, 4)
        ex = objs(run(tradb, db, NN + "EXPLAIN ANALYZE (FORMAT JSON) COMMIT;\n", 4))[0]
        proj = next(x for x in ex["chosen"]["nodes"] if x["output"] == "proj")
        # horizontal: the points label n partitions the projection; vertical:
        # the feature label d (aggregated) is split, partials combined
        got = "vertical" if proj["name"].startswith("CMM") or "2-phase" in proj["name"] else "horizontal"
        print(f"### {name}: N={N} D={D}\n")
        print(f"- chosen: `{ex['chosen']['name']}`")
        print(f"- predicted {ex['predicted_transfer_floats']:.3g} floats, measured "
              f"{ex['measured_transfer_floats']:.3g}, {ex['elapsed_s']:.3f} s")
        for alt in ex["alternatives"][:4]:
            print(f"  - alternative {alt['predicted_transfer_floats']:.3g} floats: `{alt['name']}`")
        check(got == want, f"{name}: {want} plan chosen (proj: {proj['name']})")
        check(ex["measured_transfer_floats"] == ex["predicted_transfer_floats"], f"{name}: measured = predicted")
        print()

FFNN = """BEGIN;
H[n,h] = sigmoid(SUM(X[n,d] * W1[d,h]));
O[n,l] = H[n,h] * W2[h,l];
G[n,l] = O[n,l] - Y[n,l];
dH[n,h] = SUM(G[n,l] * W2[h,l]) * H[n,h] * (1 - H[n,h]);
W2[h,l] = W2[h,l] - 0.001 * SUM(H[n,h] * G[n,l]);
W1[d,h] = W1[d,h] - 0.001 * SUM(X[n,d] * dH[n,h]);
"""

def ffnn(a, tradb, tmp):
    print("## One SGD iteration of a two-layer FFNN (TRA paper 6.3, Table 9)\n")
    shapes = [("speech-like", 8192, 256, 2048, 16, "data parallel"),
              ("extreme classification", 512, 16384, 64, 16384, "model parallel")]
    for name, N, D, Hh, L, want in shapes:
        db = os.path.join(tmp, "ffnn_" + name[:6])
        cn = N // 4 if want == "data parallel" else N
        cd = D if want == "data parallel" else D // 4
        cl = L if want == "data parallel" else L // 4
        setup = (f"CREATE TENSOR X[{N},{D}] CHUNK [{cn},{cd}];\nCREATE TENSOR Y[{N},{L}] CHUNK [{cn},{cl}];\n"
                 f"CREATE TENSOR W1[{D},{Hh}] CHUNK [{cd},{Hh}];\nCREATE TENSOR W2[{Hh},{L}] CHUNK [{Hh},{cl}];\n"
                 "FILL X UNIFORM(0, 1) SEED 6;\nFILL Y UNIFORM(0, 1) SEED 7;\n"
                 "FILL W1 NORMAL(0, 0.05) SEED 8;\nFILL W2 NORMAL(0, 0.05) SEED 9;\n")
        run(tradb, db, setup, 4)
        ex = objs(run(tradb, db, FFNN + "EXPLAIN ANALYZE (FORMAT JSON) COMMIT;\n", 4))[0]
        first = ex["chosen"]["nodes"][0]
        got = "data parallel" if " by n" in first["name"] or "[n" in first["name"] else "model parallel"
        print(f"### {name}: N={N} D={D} H={Hh} L={L}, chunks of the data by "
              f"{'the batch' if want == 'data parallel' else 'features / labels'}\n")
        print(f"- first layer: `{first['name']}`; whole block: `{ex['chosen']['name']}`")
        print(f"- predicted {ex['predicted_transfer_floats']:.3g} floats, measured "
              f"{ex['measured_transfer_floats']:.3g}, {ex['elapsed_s']:.3f} s, optimized in {ex['optimize_ms']:.1f} ms")
        check(got == want, f"{name}: {want}-like plan chosen")
        check(ex["measured_transfer_floats"] == ex["predicted_transfer_floats"], f"{name}: measured = predicted")
        print()

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tradb", default="./tradb")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="matmul at half size")
    ap.add_argument("--only", choices=["matmul", "nn", "ffnn"])
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tradb-opt-", dir=os.environ.get("TMPDIR", "/tmp"))
    try:
        for f in (matmul, nn, ffnn):
            if not a.only or a.only == f.__name__:
                f(a, a.tradb, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"**{len(fails)} check(s) failed**" if fails else "**all checks passed**")
    sys.exit(1 if fails else 0)

if __name__ == "__main__":
    main()
