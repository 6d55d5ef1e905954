#!/usr/bin/env bash
# The block as one task graph on three `tradb --worker` processes with
# less memory than the optimizer's plan would hold on them (it runs as
# planned when it fits; see tests/golden/scheduler): EXPLAIN says why and
# shows the placement per worker within
# each worker's --memory (the small one's tasks come in waves), EXPLAIN
# ANALYZE (FORMAT JSON) the measured and predicted peak memory per site,
# (FORMAT TRACE) a Chrome trace with one event per task; every scheduler
# gives the result NumPy gives; a worker killed between blocks leaves the
# next block to the survivors, with the same result.  Polls with
# deadlines; never sleeps a fixed time to wait for a state.
TEST=schedule
source "$TOP_SRCDIR/tests/multi/lib.sh"
PY=/usr/bin/python3
$PY -c 'import numpy' 2>/dev/null || { echo "$TEST: skipped (no numpy)"; exit 77; }

start_worker 0 --threads 1 --memory 4M
start_worker 1 --threads 1 --memory 4M
start_worker 2 --threads 1 --memory 1M
workers="${ep[0]},${ep[1]},${ep[2]}"
db=$work/db
cd "$work"
$PY - <<'EOF2'
import numpy as np
rng = np.random.default_rng(14)
np.save("A.npy", rng.standard_normal((1536, 768)).astype(np.float32))
np.save("B.npy", rng.standard_normal((768, 512)).astype(np.float32))
EOF2
block='BEGIN;
C[i,j] = A[i,k] * B[k,j];
r[i] = SUM(C[i,j]);
COMMIT;
SAVE r TO '"'"'r_NAME.npy'"'"';'
run() { "$TRADB" --workers "$workers" "$db" > "$work/$1.out" 2> "$work/$1.err" || fail "$1: $(cat "$work/$1.err")"; }
run setup <<'EOF2'
LOAD A FROM 'A.npy' CHUNK [128, 128];
LOAD B FROM 'B.npy' CHUNK [128, 128];
EOF2
for s in msct metf mtopo statement; do
  { echo "SET scheduler = $s;"; echo "${block//NAME/$s}"; } | run "block_$s"
done
check_r() {
  $PY - "$@" <<'EOF2' || fail "results differ from NumPy's: $*"
import sys, numpy as np
want = (np.load("A.npy") @ np.load("B.npy")).sum(axis=1)
for name in sys.argv[1:]:
    got = np.load("r_%s.npy" % name)
    assert np.allclose(got, want, rtol=1e-4, atol=1e-3), (name, float(abs(got - want).max()))
EOF2
}
check_r msct metf mtopo statement
ok

# EXPLAIN: the placement per worker, within each one's memory.
printf 'SET scheduler = msct;\nBEGIN;\nC[i,j] = A[i,k] * B[k,j];\nr[i] = SUM(C[i,j]);\nEXPLAIN COMMIT;\n' | run explain
grep -q "^Schedule: m-SCT, [0-9]* chunk tasks reading 96 stored chunks" "$work/explain.out" || fail "no m-SCT schedule in EXPLAIN: $(cat "$work/explain.out")"
grep -q "^  the optimizer's plan holds .* MiB on worker [0-9], over its --memory" "$work/explain.out" \
  || fail "EXPLAIN does not say why the scheduler placed the tasks: $(cat "$work/explain.out")"
[ "$(grep -c '^  worker [0-9] (' "$work/explain.out")" -eq 3 ] || fail "EXPLAIN does not list the three workers"
awk '/^  worker / && / predicted peak memory / {
       split($0, a, "predicted peak memory "); split(a[2], b, " of "); if (b[1] + 0 > b[2] + 0) bad = 1 }
     END { exit bad }' "$work/explain.out" || fail "a worker's predicted peak is above its memory"
ok

# EXPLAIN ANALYZE (FORMAT JSON): measured and predicted peak memory per site.
printf 'BEGIN;\nC[i,j] = A[i,k] * B[k,j];\nr[i] = SUM(C[i,j]);\nEXPLAIN ANALYZE (FORMAT JSON) COMMIT;\n' | run json
$PY - "$work/json.out" <<'EOF2' || fail "EXPLAIN ANALYZE JSON: $(cat "$work/json.out")"
import json, sys
d = json.load(open(sys.argv[1]))
sites = d["per_site"]
assert len(sites) == 3
assert any(s["tasks"] for s in sites)
for s in sites:
    if s["tasks"]:
        assert s["peak_memory_bytes"] > 0, s
        assert 0 < s["predicted_peak_memory_bytes"], s
sc = d["schedule"]
assert sc["scheduler"] == "msct" and sc["tasks"] > 0
mem = sorted(s["memory_bytes"] for s in sc["per_worker"])
assert mem == [1 << 20, 4 << 20, 4 << 20], mem
for s in sc["per_worker"]:
    assert s["predicted_peak_memory_bytes"] <= s["memory_bytes"], s
assert d["measured_makespan_s"] > 0
EOF2
ok

# (FORMAT TRACE): one complete event per task, on the worker placed, and
# after ANALYZE the tasks as they ran, a process per worker beside them.
printf 'SET scheduler = metf;\nEXPLAIN ANALYZE (FORMAT TRACE) D[i,j] = A[i,k] * B[k,j];\n' | run trace
$PY - "$work/trace.out" <<'EOF2' || fail "not a trace: $(head -c 400 "$work/trace.out")"
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in d["traceEvents"] if e["ph"] == "X" and e["cat"] == "task"]
assert len(ev) > 0, len(ev)
assert {e["pid"] for e in ev} <= {0, 1, 2}
ran = [e for e in d["traceEvents"] if e["ph"] == "X" and e["cat"] == "measured"]
assert ran and {e["pid"] for e in ran} <= {3, 4, 5} and all(e["dur"] > 0 for e in ran), ran
assert d["otherData"]["algorithm"] == "m-ETF"
EOF2
ok

# m-SCT's LP out of time (a limit of 0): m-ETF places the graph, EXPLAIN
# and a notice say so, and the result is the same.
printf 'SET scheduler = msct;\nSET scheduler_lp_seconds = 0;\nBEGIN;\nC[i,j] = A[i,k] * B[k,j];\nr[i] = SUM(C[i,j]);\nEXPLAIN COMMIT;\n' | run lp
grep -q "^Schedule: m-ETF" "$work/lp.out" || fail "no m-ETF after the LP failed: $(cat "$work/lp.out")"
grep -q "^  the LP failed (.*): m-ETF placed the tasks" "$work/lp.out" || fail "EXPLAIN does not say why: $(cat "$work/lp.out")"
grep -q "m-SCT: .*; m-ETF placed the tasks" "$work/lp.err" \
  || fail "no notice of the fallback: $(cat "$work/lp.err")"
{ echo "SET scheduler = msct;"; echo "${block//NAME/lp}"; } | run lp_block
check_r lp
printf 'SET scheduler_lp_seconds = 10;\n' | run lp_back
ok

# A graph of more than 5000 chunk tasks (A in 8 x 16 chunks: 9216 of
# them) is more than m-SCT places: m-TOPO places it within the workers'
# memory, where the plan once ran unscheduled, beyond it.  EXPLAIN and a
# notice say so; the result is NumPy's.
printf "LOAD F FROM 'A.npy' CHUNK [8, 16];\nSET scheduler = msct;\nEXPLAIN E[i,j] = exp(F[i,j] * 0.25);\nE[i,j] = exp(F[i,j] * 0.25);\nSAVE E TO 'E.npy';\n" | run wide
grep -q "^Schedule: m-TOPO, [0-9]* chunk tasks reading 9216 stored chunks" "$work/wide.out" \
  || fail "no m-TOPO schedule for 9216 chunks: $(grep -A4 '^Schedule' "$work/wide.out")"
grep -q "^  m-SCT places at most 5000 tasks: m-TOPO placed these" "$work/wide.out" \
  || fail "EXPLAIN does not say why m-TOPO placed them: $(grep -A4 '^Schedule' "$work/wide.out")"
awk '/^  worker / && / predicted peak memory / {
       split($0, a, "predicted peak memory "); split(a[2], b, " of "); if (b[1] + 0 > b[2] + 0) bad = 1 }
     END { exit bad }' "$work/wide.out" || fail "a worker's predicted peak is above its memory"
[ "$(grep -c 'more than m-SCT places: m-TOPO placed them' "$work/wide.err")" -eq 1 ] \
  || fail "not one notice of m-TOPO in the session: $(cat "$work/wide.err")"
$PY - <<'EOF2' || fail "exp(A / 4) differs from NumPy's"
import numpy as np
assert np.allclose(np.load("E.npy"), np.exp(np.load("A.npy") * 0.25), rtol=1e-5, atol=1e-6)
EOF2
ok

# A tensor four times the memory of the two workers together (2 MiB
# each, 16 MiB of A): filled, multiplied, reduced and saved right; the
# graph is placed in waves, each within the workers' memory.
start_worker 3 --threads 1 --memory 2M
start_worker 4 --threads 1 --memory 2M
small="${ep[3]},${ep[4]}"
"$TRADB" --workers "$small" "$work/ooc" > "$work/ooc.out" 2> "$work/ooc.err" <<EOF2 || fail "out of core: $(cat "$work/ooc.err")"
CREATE TENSOR A[4096, 1024] CHUNK [256, 256];
CREATE TENSOR B[1024, 64] CHUNK [256, 64];
FILL A UNIFORM(-1, 1) SEED 5;
FILL B UNIFORM(-1, 1) SEED 6;
BEGIN;
C[i,j] = A[i,k] * B[k,j];
r[i] = SUM(C[i,j]);
EXPLAIN ANALYZE COMMIT;
SAVE A TO '$work/ooc_A.npy';
SAVE B TO '$work/ooc_B.npy';
SAVE r TO '$work/ooc_r.npy';
EOF2
waves=$(sed -n 's/^Schedule: .* \([0-9][0-9]*\) waves;.*/\1/p' "$work/ooc.out")
[ "${waves:-1}" -gt 1 ] || fail "a graph four times the memory was not cut into waves: $(grep -A3 '^Schedule' "$work/ooc.out")"
awk '/^  worker / && / predicted peak memory / {
       split($0, a, "predicted peak memory "); split(a[2], b, " of "); if (b[1] + 0 > b[2] + 0) bad = 1 }
     END { exit bad }' "$work/ooc.out" || fail "a wave's predicted peak is above a worker's memory"
$PY - "$work" <<'EOF2' || fail "out-of-core result differs from NumPy's"
import sys, numpy as np
w = sys.argv[1]
A = np.load(w + "/ooc_A.npy")
assert A.nbytes == 4 * (4 << 20), A.nbytes
want = (A.astype(np.float64) @ np.load(w + "/ooc_B.npy")).sum(axis=1)
assert np.allclose(np.load(w + "/ooc_r.npy"), want, rtol=1e-4, atol=1e-3)
EOF2
ok

# A budget the optimizer's plan fits: it runs as planned, and EXPLAIN says so.
start_worker 5 --threads 1 --memory 256M
start_worker 6 --threads 1 --memory 256M
printf 'LOAD A FROM '"'"'A.npy'"'"' CHUNK [128, 128];\nLOAD B FROM '"'"'B.npy'"'"' CHUNK [128, 128];\nBEGIN;\nC[i,j] = A[i,k] * B[k,j];\nr[i] = SUM(C[i,j]);\nEXPLAIN COMMIT;\n' \
  | "$TRADB" --workers "${ep[5]},${ep[6]}" "$work/roomy" > "$work/roomy.out" 2> "$work/roomy.err" || fail "roomy: $(cat "$work/roomy.err")"
grep -q "^Schedule: the optimizer's plan, node by node (it fits every worker's memory)" "$work/roomy.out" \
  || fail "a plan that fits was rescheduled: $(grep -A3 '^Schedule' "$work/roomy.out")"
ok

# A worker killed between blocks: the next block runs on the survivors.
stop_worker 2
{ echo "SET scheduler = msct;"; echo "${block//NAME/after}"; } | run after
check_r after
ok
finish
