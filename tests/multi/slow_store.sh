#!/usr/bin/env bash
# A worker whose disk is slow keeps heartbeating: the chunks it is sent
# (PUT), asked for (GET), told to send to another worker (SEND), to drop
# (DROP) or to keep (KEEP, when a shell opens the database) are written,
# read and removed on its store thread, so a disk access that takes longer
# than the coordinator's liveness window (1.5 s) does not make the worker
# look down.  TRADB_TEST_SLOW_STORE_MS makes every such access take that
# long (the local workers inherit it).
set -euo pipefail
fail() { echo "slow_store: FAIL: $*"; exit 1; }
slow=1800

# Replica pushes between the two workers are PUTs.
out=$(TRADB_TEST_SLOW_STORE_MS=$slow "$TRADB" --local-workers 2 -c '
CREATE TENSOR A[64, 32] CHUNK [32, 32];
FILL A ONES;
s[] = SUM(A[i,j]);
PRINT s;
.workers' 2>&1) || fail "statements failed: $out"
grep -q 'is down' <<<"$out" && fail "a slow worker was taken for down: $out"
grep -Fxq '2048' <<<"$out" || fail "wrong sum: $out"
# Both workers received a replica (one 4 KiB chunk each) through the slow store.
n=$(echo "$out" | awk '$1 ~ /^ipc:/ && $2 == "up" && $6 >= 4096' | wc -l)
[ "$n" -eq 2 ] || fail "expected both workers up with a received replica: $out"

# With one replica a product must move chunks between the workers (SEND),
# and PRINT fetches them (GET).
out=$(TRADB_TEST_SLOW_STORE_MS=$slow "$TRADB" --local-workers 2 -c '
SET replication = 1;
CREATE TENSOR B[64, 64] CHUNK [32, 32];
FILL B ONES;
EXPLAIN ANALYZE (FORMAT JSON) C[i,j] = B[i,k] * B[k,j];
PRINT C[0:1, 0:2];' 2>&1) || fail "statements with moves failed: $out"
grep -q 'is down' <<<"$out" && fail "a slow worker was taken for down: $out"
moved=$(echo "$out" | sed -n 's/.*"measured_transfer_floats": \([0-9]*\).*/\1/p')
[ -n "$moved" ] && [ "$moved" -gt 0 ] || fail "the product moved no chunks: $out"
echo "$out" | tail -1 | grep -Eq '^64 +64$' || fail "wrong product: $out"
echo "slow_store: 2 passed, 0 failed"
