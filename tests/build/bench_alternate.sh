#!/bin/sh
# scripts/bench_alternate.py at the suite's small sizes: two workloads,
# tradb and every peer installed taking turns, each peer's outputs checked
# against tradb's before a pass is timed; the summary table names the
# fastest peer of each workload.  A harness check, not a benchmark.
PY=${PYTHON3:-python3}
"$PY" -c 'import numpy' 2>/dev/null || { echo "bench_alternate: skipped (no numpy)"; exit 77; }
peers="--peer numpy"
"$PY" -c 'import torch' 2>/dev/null && peers="$peers --peer torch"
"$PY" -c 'import dask.array, dask.distributed' 2>/dev/null && peers="$peers --peer dask-threads"
out=$("$PY" "$TOP_SRCDIR/scripts/bench_alternate.py" nn-wide,attention --size small --passes 2 \
  --tradb "$TRADB" $peers 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "bench_alternate: exit status $rc"; exit 1; }
for w in nn-wide attention; do
  echo "$out" | grep -q "^| $w | [0-9.]* | " || { echo "bench_alternate: no row for $w"; exit 1; }
done
echo "$out" | grep -q "^[0-9] of 2 workloads within 1.10x" || { echo "bench_alternate: no summary"; exit 1; }
echo "bench_alternate: ok"
