#!/usr/bin/env bash
# A worker keeps the heap its chunks used while statements come (the next
# one reuses it), and gives the free part back once it has been idle: after
# statements over 256 MB tensors, the local workers' resident memory must
# fall below 200 MB while the shell stays open.  (Without the idle trim
# each keeps about 650 MB.)  Polls with a deadline; never sleeps a fixed
# time to wait for a state.
set -euo pipefail
work=$(mktemp -d)
pid=
cleanup() {
  exec 3>&- 2>/dev/null || true
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "idle_memory: FAIL: $*"; exit 1; }
db=$work/db

mkfifo "$work/in"
"$TRADB" --local-workers 2 "$db" < "$work/in" > "$work/out" 2>&1 &
pid=$!
exec 3> "$work/in"
cat >&3 <<'EOF2'
CREATE TENSOR A[8192, 8192] CHUNK [2048, 2048] TYPE f32;
FILL A ONES;
B[i,j] = A[i,j] * 2;
C[i,j] = B[i,j] + A[i,j];
DROP TENSOR statements_done;
EOF2
deadline=$((SECONDS + 120))
# The shell's output is buffered while its input stays open; the error of
# the last line, on stderr, says the statements before it are done.
until grep -q "no such tensor: statements_done" "$work/out"; do
  kill -0 "$pid" 2>/dev/null || { cat "$work/out"; fail "shell ended early"; }
  [ $SECONDS -lt $deadline ] || fail "statements not done within 120 s"
  sleep 0.1
done
[ "$(wc -l < "$work/out")" -eq 1 ] || { cat "$work/out"; fail "a statement failed"; }

# The local workers: the processes serving this database's sockets.
workers=$(pgrep -f -- "--listen ipc://$db/workers/w[01].ipc" || true)
[ "$(echo "$workers" | wc -w)" -eq 2 ] || fail "expected 2 local workers, found: $workers"
rss() { awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$1/status"; }
deadline=$((SECONDS + 20))
for w in $workers; do
  until [ "$(rss "$w")" -lt 200 ]; do
    [ $SECONDS -lt $deadline ] || fail "worker $w still holds $(rss "$w") MB after 20 s idle"
    sleep 0.2
  done
done
exec 3>&-
status=0
wait "$pid" || status=$?
pid=
[ "$status" -eq 1 ] || fail "shell exit status $status, not 1 (the marker's error)"
echo "idle_memory: 1 passed, 0 failed"
