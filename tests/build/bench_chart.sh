#!/bin/sh
# make bench's chart (scripts/bench.py chart) drawn by gnuplot for results
# where tradb is behind every peer, ahead of every peer, and behind one and
# ahead of another: a label plot with no point made gnuplot 5.4 crash, also
# one peer's iteration of a `for` with none, so a run of one workload (make
# bench BENCH_ARGS='--only nn-large') failed after its timings.
command -v gnuplot >/dev/null 2>&1 || { echo "bench_chart: skipped (no gnuplot)"; exit 77; }
PY=${PYTHON3:-python3}
"$PY" -c 'import numpy' 2>/dev/null || { echo "bench_chart: skipped (no numpy for scripts/bench.py)"; exit 77; }
out=$(mktemp -d) || exit 1
trap 'rm -rf "$out"' EXIT
exec "$PY" - "$TOP_SRCDIR/scripts" "$out" <<'EOF2'
import os, sys
sys.path.insert(0, sys.argv[1])
import bench
out = sys.argv[2]
class W:
    def __init__(self, name): self.name = name
for case, numpy, torch in (("behind", 1 / 1.5, 1 / 1.5), ("ahead", 2.0, 2.0), ("mixed", 2.0, 0.8)):
    d = os.path.join(out, case)
    os.makedirs(d)
    results = [{"w": W("one"), "samples": {"tradb": [1.0] * 3, "numpy": [numpy] * 3, "torch": [torch] * 3}}]
    svg = bench.chart(results, d, os.path.join(d, "log"))
    assert svg and os.path.getsize(svg) > 0, case
    for peer in (numpy, torch):
        assert "%.2f" % (1 / peer) in open(svg).read(), case + ": no value label"
print("bench_chart: ok")
EOF2
