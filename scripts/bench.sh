#!/usr/bin/env bash
# scripts/bench.sh - tradb's benchmark suite (`make bench`): the TRA paper's
# workloads (matmul in three shape regimes, nearest neighbour in a
# Riemannian metric, one SGD step of a two-layer FFNN), EinDecomp's (an
# attention layer, matrix chains), the matrix-format thesis's DAG of
# products and a fresh session's first statement, against OpenBLAS,
# ScaLAPACK, NumPy, PyTorch and Dask, each result checked against NumPy
# before its time is kept.  The suite itself is scripts/bench.py, run with
# Debian's /usr/bin/python3 (python3-numpy; python3-torch, python3-dask and
# python3-distributed for those peers: a peer not installed is skipped with
# a note); see its header and BENCHMARKS.md.
#
# Usage: scripts/bench.sh [--size default|large|small] [--reps R] [--rounds N] [--only W1,W2]
#                         [--nworkers P] [--time-limit S] [--out DIR] [--write-md FILE]
#                         [--synchronous full,normal] [--cold] [--profile]
#   make bench                         the default sizes, about half an hour on 2 cores
#   make bench BENCH_SIZE=large        the large versions
#   make bench BENCH_ARGS='--only mm-general --reps 5'
#   make bench BENCH_ARGS='--cold'     every workload as a fresh session's first pass
#   scripts/bench.sh --write-md BENCHMARKS.md   refresh BENCHMARKS.md's results
# Environment: TRADB (the binary, default ./tradb), TMPDIR (scratch space).
set -euo pipefail
python=${BENCH_PYTHON:-/usr/bin/python3}
"$python" -c 'import numpy' 2>/dev/null || {
  echo "bench.sh: $python cannot import numpy (scripts/install-deps.sh installs python3-numpy)" >&2
  exit 1
}
exec "$python" "$(dirname "$0")/bench.py" "$@"
