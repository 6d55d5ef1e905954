#!/usr/bin/env bash
# A worker whose disk is slow keeps heartbeating: PUTs are stored on the
# worker's store thread, so a write that takes longer than the
# coordinator's liveness window (1.5 s) does not make the worker look
# down.  TRADB_TEST_SLOW_STORE_MS makes every stored PUT take that long
# (the local workers inherit it); replica pushes between the two workers
# are PUTs.
set -euo pipefail
fail() { echo "slow_store: FAIL: $*"; exit 1; }
out=$(TRADB_TEST_SLOW_STORE_MS=2500 "$TRADB" --local-workers 2 -c '
CREATE TENSOR A[64, 32] CHUNK [32, 32];
FILL A ONES;
s[] = SUM(A[i,j]);
PRINT s;
.workers' 2>&1) || fail "statements failed: $out"
echo "$out" | grep -q 'is down' && fail "a slow worker was taken for down: $out"
echo "$out" | grep -Fxq '2048' || fail "wrong sum: $out"
# Both workers received a replica (one 4 KiB chunk each) through the slow store.
n=$(echo "$out" | awk '$1 ~ /^ipc:/ && $2 == "up" && $6 >= 4096' | wc -l)
[ "$n" -eq 2 ] || fail "expected both workers up with a received replica: $out"
echo "slow_store: 1 passed, 0 failed"
