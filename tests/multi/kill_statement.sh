#!/usr/bin/env bash
# A shell killed with SIGKILL in the middle of a statement leaves the
# previous state intact (its local workers die with it), and the chunks
# the statement left on the workers are dropped when the database is next
# opened.  A damaged chunk is read from its other replica; with a single
# replica the error names the tensor and the chunk.  Polls with a
# deadline; never sleeps a fixed time to wait for a state.
set -euo pipefail
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
db=$work/db
fail() { echo "kill_statement: FAIL: $*"; exit 1; }
nchunks() { find "$db/workers" -name '*.chk' | wc -l; }

# synchronous = full: the statement below writes each output chunk to its
# file as it is made, which is how the test sees it mid-way (under normal
# they stay in the workers' memory until the workers are idle).
# layout = declared: the product runs in the stored chunks, many output
# chunks one after another (the auto layout makes fewer, larger ones).
"$TRADB" "$db" <<'EOF2' || fail "set-up failed"
SET synchronous = full;
SET layout = declared;
CREATE TENSOR A[1536, 1536] CHUNK [256, 256];
FILL A ONES;
C[i,j] = A[i,j] * 2;
EOF2
before=$(nchunks)

# The reference backend makes the product slow enough to catch mid-way.
"$TRADB" --backend reference "$db" <<<'C[i,j] = A[i,k] * A[k,j];' &
pid=$!
deadline=$((SECONDS + 60))
while [ "$(nchunks)" -le "$before" ]; do
  kill -0 "$pid" 2>/dev/null || fail "statement ended before any chunk was written"
  [ $SECONDS -lt $deadline ] || fail "no chunk written within 60 s"
  sleep 0.05
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
pid=
[ "$(nchunks)" -gt "$before" ] || fail "expected leftover chunks"

out=$("$TRADB" "$db" <<<'PRINT C[0:1, 0:3];') || fail "reopen failed"
expected=$'C[0:1, 0:3] (f32)\n2  2  2'
[ "$out" = "$expected" ] || fail "previous state lost: got '$out'"
after=$(nchunks)
[ "$after" -eq "$before" ] || fail "leftover chunks not dropped ($after files, expected $before)"

# Damage one replica of every chunk on worker 0: reads go to worker 1.
for f in $(find "$db/workers/w0" -name '*.chk'); do
  printf '\x55' | dd of="$f" bs=1 seek=100 conv=notrunc status=none
done
out=$("$TRADB" "$db" <<<'s[] = SUM(C[i,j]); PRINT s;') || fail "replica not used after damage"
[ "$out" = $'s[] (f32)\n4.71859e+06' ] || fail "wrong sum from replicas: '$out'"

# With one replica, damage is an error naming the tensor and the chunk.
"$TRADB" "$db" <<'EOF2' || fail "set-up of single replica failed"
SET replication = 1;
D[i,j] = A[i,j] + 1;
EOF2
for f in $(find "$db/workers" -name '*.chk'); do
  printf '\x55' | dd of="$f" bs=1 seek=100 conv=notrunc status=none
done
set +e
err=$("$TRADB" "$db" <<<'t[] = SUM(D[i,j]);' 2>&1 >/dev/null)
rc=$?
set -e
[ $rc -eq 1 ] || fail "expected exit status 1 after corruption, got $rc"
grep -Eq "line 1: .*tensor D chunk \[[0-9]+,[0-9]+\]" <<<"$err" \
  || fail "corruption not reported by tensor and chunk: $err"
echo "kill_statement: 4 passed, 0 failed"
