#!/usr/bin/env bash
# scripts/bench_gpu.sh - the GPU benchmark: tradb's CUDA backend against
# direct cuBLAS calls measured in the same run on the same GPU.
#
#  (a) One N x N f32 product (N 8192) through the kernel table, against one
#      direct cublasSgemm (scripts/bench_gpu.c, `bench_gpu table`).  The
#      requirement: at least 0.9x the direct call's throughput with the
#      operands kept on the device, as inside a plan (table_kept).
#  (b) C[i,j] = A[i,k] * B[k,j] on M x M f32 tensors (M 16384) with C x C
#      chunks (C 4096) on ONE GPU worker: tradb's time against one direct
#      cuBLAS call on the whole matrices (device-resident, and with host
#      copies), and the time the worker spent in host-device copies (from
#      EXPLAIN ANALYZE's per-site gpu_copy_s).
#
# Usage: scripts/bench_gpu.sh [--size N] [--big M] [--chunk C] [--reps R]
#   defaults: N 8192, M 16384, C 4096, R 5.  `make bench-gpu BENCH_GPU_ARGS='...'`
#   from a build configured with CUDA (./configure finds nvcc by itself, or
#   ./configure --with-cuda=/usr/local/cuda).
# Environment: TRADB (default ./tradb), BENCH_GPU (default
#   ./scripts/bench_gpu), TMPDIR (scratch database; part (b) needs about
#   4 * M * M bytes of disk and twice that of host memory).
#
# What is timed in (b): one tradb process with one local worker (--device
# gpu) creates and fills A and B (untimed), then runs the assignment R + 1
# times as EXPLAIN ANALYZE; the first is a warm-up (CUDA context, cuBLAS
# start-up), the table reports medians of the others: the statement's
# elapsed time (store reads, kernels, copies, commit), its local_join time
# (the tasks alone) and the worker's copy time.
#
# Without a GPU the script says so and exits 77 (skipped).
# Output: stdout, and bench-out/gpu.md in the current directory.
set -euo pipefail
export LC_ALL=C

usage() {
  echo "usage: $0 [--size N] [--big M] [--chunk C] [--reps R]" >&2
  exit 2
}

size=8192
big=16384
chunk=4096
reps=5
cmdline="$0 $*"
while [ $# -gt 0 ]; do
  case "$1" in
    --size) [ $# -ge 2 ] || usage; size=$2; shift 2 ;;
    --big) [ $# -ge 2 ] || usage; big=$2; shift 2 ;;
    --chunk) [ $# -ge 2 ] || usage; chunk=$2; shift 2 ;;
    --reps) [ $# -ge 2 ] || usage; reps=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "bench_gpu.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
for v in "$size" "$big" "$chunk" "$reps"; do
  case "$v" in ''|*[!0-9]*) echo "bench_gpu.sh: '$v' is not a positive integer" >&2; exit 2 ;; esac
done

TRADB=${TRADB:-./tradb}
BENCH_GPU=${BENCH_GPU:-./scripts/bench_gpu}
for f in "$TRADB" "$BENCH_GPU"; do
  [ -x "$f" ] || { echo "bench_gpu.sh: $f not built (run make, or make bench-gpu)" >&2; exit 2; }
done
device=$("$TRADB" --version | sed -n 's/^cuda device: //p')
if ! "$TRADB" --version | grep -q '^kernels:.*cuda'; then
  echo "bench_gpu.sh: skipped: $TRADB was built without CUDA (./configure --with-cuda)" >&2
  exit 77
fi
case "$device" in
  none*|'')
    echo "bench_gpu.sh: skipped: no usable GPU here (cuda device: ${device:-?})." >&2
    echo "Run it on a machine with an NVIDIA GPU: make bench-gpu  (or $cmdline)" >&2
    exit 77 ;;
esac

mkdir -p bench-out
out=bench-out/gpu.md
work=$(mktemp -d "${TMPDIR:-/tmp}/tradb-bench-gpu.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== (a) one ${size}^2 f32 product: kernel table vs direct cuBLAS"
"$BENCH_GPU" table "$size" "$reps" | tee "$work/a.txt"
pass=$(sed -n 's/.*needs >= 0.90: \([A-Z]*\)).*/\1/p' "$work/a.txt")

echo "== (b) ${big}^2 f32 product, ${chunk}^2 chunks, one GPU worker vs one cuBLAS call"
"$BENCH_GPU" direct "$big" "$reps" | tee "$work/b_direct.txt"
direct=$(awk '$1 == "direct_sgemm" {print $2}' "$work/b_direct.txt")
direct_h2h=$(awk '$1 == "direct_h2h" {print $2}' "$work/b_direct.txt")
db="$work/db"
tr() { "$TRADB" --local-workers 1 --device gpu "$db"; }
printf '%s\n' \
  "CREATE TENSOR A[$big, $big] CHUNK [$chunk, $chunk];" \
  "CREATE TENSOR B[$big, $big] CHUNK [$chunk, $chunk];" \
  "FILL A UNIFORM(-1, 1) SEED 1;" \
  "FILL B UNIFORM(-1, 1) SEED 2;" | tr
for r in $(seq 0 "$reps"); do
  echo "EXPLAIN ANALYZE (FORMAT JSON) C[i,j] = A[i,k] * B[k,j];"
done | tr > "$work/b_runs.json"
python3 - "$work/b_runs.json" "$direct" "$direct_h2h" "$big" <<'EOF' | tee "$work/b.txt"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][1:]
direct, h2h, n = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
med = lambda xs: statistics.median(xs)
elapsed = med([r["elapsed_s"] for r in runs])
join = med([o["time_s"] for r in runs for o in r["operators"] if o["op"] == "local_join"])
site = [r["per_site"][0] for r in runs]
copy = med([s["gpu_copy_s"] for s in site])
up = med([s["gpu_h2d_bytes"] for s in site]) / 1e9
down = med([s["gpu_d2h_bytes"] for s in site]) / 1e9
gf = lambda s: 2.0 * n ** 3 / s * 1e-9
print(f"tradb_elapsed  {elapsed:.6f} s  {gf(elapsed):8.1f} GFLOP/s  kernels {site[0]['kernels']}")
print(f"tradb_join     {join:.6f} s  {gf(join):8.1f} GFLOP/s  the tasks alone")
print(f"gpu_copies     {copy:.6f} s  {up:.2f} GB up, {down:.2f} GB down (worker, per statement)")
print(f"ratio          {direct / elapsed:.3f} of one direct cuBLAS call (device-resident), "
      f"{h2h / elapsed:.3f} with its host copies; join alone {direct / join:.3f}")
EOF

{
  echo "# GPU benchmark ($(date -u +%Y-%m-%d))"
  echo
  echo "Device: $device; $(nproc) cores; command: \`$cmdline\`"
  echo
  echo "## (a) one ${size}^2 f32 product through the kernel table (requirement >= 0.90x: ${pass:-?})"
  echo
  echo '```'
  cat "$work/a.txt"
  echo '```'
  echo
  echo "## (b) ${big}^2 f32, ${chunk}^2 chunks, one GPU worker vs one direct cuBLAS call"
  echo
  echo '```'
  cat "$work/b_direct.txt" "$work/b.txt"
  echo '```'
} > "$out"
echo "results in $out"
[ "$pass" = PASS ]
