#!/usr/bin/env bash
# SIGINT (Ctrl-C) cancels the running statement, not the data: the shell
# reports "interrupted", stops the batch with status 1, and the statement's
# output never appears.  Polls with a deadline; never sleeps a fixed time.
set -euo pipefail
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && { kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$work"; }
trap cleanup EXIT
db=$work/db
fail() { echo "interrupt: FAIL: $*"; exit 1; }

# synchronous = full: the statement's output chunks appear as files as
# they are made, which is how the test sees it mid-way (under normal they
# stay in the workers' memory until it ends).  layout = declared: the
# product runs in A's 256 x 256 chunks, many output chunks over seconds on
# the reference kernels (the auto layout makes fewer, larger ones, the
# first appearing near the end).
"$TRADB" "$db" <<'EOF2' || fail "set-up failed"
SET synchronous = full;
SET layout = declared;
CREATE TENSOR A[1536, 1536] CHUNK [256, 256];
FILL A ONES;
EOF2
before=$(find "$db/workers" -name "*.chk" | wc -l)
printf 'C[i,j] = A[i,k] * A[k,j];\nCREATE TENSOR after[1];\n' > "$work/script.tql"
# In its own process group, so that SIGINT can go to the whole group as a
# terminal's Ctrl-C does: it must cancel the statement, not stop the
# shell's local workers.
setsid "$TRADB" --backend reference "$db" < "$work/script.tql" 2> "$work/err" &
pid=$!
deadline=$((SECONDS + 60))
while [ "$(find "$db/workers" -name "*.chk" | wc -l)" -le "$before" ]; do
  kill -0 "$pid" 2>/dev/null || fail "statement ended before it could be interrupted"
  [ $SECONDS -lt $deadline ] || fail "statement did not start within 60 s"
  sleep 0.05
done
for w in $(pgrep -f -- "--listen ipc://$db/workers/w"); do
  [ "$(ps -o pgid= -p "$w" | tr -d ' ')" != "$pid" ] || fail "local worker $w is in the shell's process group"
done
kill -INT -- "-$pid"
deadline=$((SECONDS + 30))
while kill -0 "$pid" 2>/dev/null; do
  [ $SECONDS -lt $deadline ] || fail "shell still running 30 s after SIGINT"
  sleep 0.05
done
set +e
wait "$pid"
rc=$?
set -e
pid=
[ $rc -eq 1 ] || fail "exit status $rc after interrupt, expected 1"
grep -q "^line 1: interrupted" "$work/err" || fail "no 'interrupted' message: $(cat "$work/err")"
# The Ctrl-C was the statement's: the shell's close still writes what its
# workers hold and makes missing replicas (a Ctrl-C during the close would
# cut those short)
! grep -q "did not write" "$work/err" || fail "the close took the statement's Ctrl-C as its own: $(cat "$work/err")"
out=$("$TRADB" "$db" <<<'.tables') || fail "reopen failed"
[ "$out" = "A" ] || fail "expected only A after the interrupt, got '$out'"
[ "$(find "$db/workers" -name "*.chk" | wc -l)" -eq "$before" ] || fail "interrupted statement left chunks"
echo "interrupt: 1 passed, 0 failed"
