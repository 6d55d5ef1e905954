#!/usr/bin/env bash
# A shell killed with SIGKILL in the middle of a statement leaves the
# previous state intact, and the chunk files it left are removed when the
# database is next opened.  A corrupted chunk is reported by name.
# Polls with a deadline; never sleeps a fixed time to wait for a state.
set -euo pipefail
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
db=$work/db
fail() { echo "kill_statement: FAIL: $*"; exit 1; }

"$TRADB" "$db" <<'EOF2' || fail "set-up failed"
CREATE TENSOR A[1536, 1536] CHUNK [256, 256];
FILL A ONES;
C[i,j] = A[i,j] * 2;
EOF2
before=$(ls "$db/chunks" | wc -l)

# The reference backend makes the product slow enough to catch mid-way.
"$TRADB" --backend reference "$db" <<<'C[i,j] = A[i,k] * A[k,j];' &
pid=$!
deadline=$((SECONDS + 60))
while [ "$(ls "$db/chunks" | wc -l)" -le "$before" ]; do
  kill -0 "$pid" 2>/dev/null || fail "statement ended before any chunk was written"
  [ $SECONDS -lt $deadline ] || fail "no chunk written within 60 s"
  sleep 0.05
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
pid=
during=$(ls "$db/chunks" | wc -l)
[ "$during" -gt "$before" ] || fail "expected leftover chunk files"

out=$("$TRADB" "$db" <<<'PRINT C[0:1, 0:3];') || fail "reopen failed"
expected=$'C[0:1, 0:3] (f32)\n2  2  2'
[ "$out" = "$expected" ] || fail "previous state lost: got '$out'"
after=$(ls "$db/chunks" | wc -l)
[ "$after" -eq "$before" ] || fail "leftover files not removed ($after files, expected $before)"

# Corrupt one payload byte of a chunk of A: reading it must fail by name.
f=$(ls "$db/chunks"/* | head -1)
printf '\x55' | dd of="$f" bs=1 seek=100 conv=notrunc status=none
set +e
err=$("$TRADB" "$db" <<<'s[] = SUM(A[i,j]); s[] = SUM(C[i,j]);' 2>&1 >/dev/null)
rc=$?
set -e
[ $rc -eq 1 ] || fail "expected exit status 1 after corruption, got $rc"
echo "$err" | grep -Eq "checksum mismatch in tensor (A|C) chunk \[[0-9]+,[0-9]+\]" \
  || fail "corruption not reported by tensor and chunk: $err"
echo "kill_statement: 3 passed, 0 failed"
