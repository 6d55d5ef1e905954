#!/usr/bin/env bash
# A worker that comes back after being down gets no backlog: while it was
# down the shell went on working with the others, and nothing it would
# have sent it (heartbeats, pings of statements long done) waits in a queue
# to reach it when it returns.  The worker traces the requests it gets.
TEST=stale; source "$TOP_SRCDIR/tests/multi/lib.sh"
for n in 0 1; do start_worker $n --threads 1; done
W="${ep[0]},${ep[1]}"
mkfifo "$work/in"
"$TRADB" --workers "$W" --backend reference "$work/db" < "$work/in" > "$work/shell.out" 2> "$work/shell.err" &
shell=$!; track $shell
exec 7> "$work/in"
echo "SET replication = 2; CREATE TENSOR A[384, 384] CHUNK [128, 128]; FILL A ONES; PRINT A[0:1, 0:1];" >&7
printed() { [ "$(wc -l < "$work/shell.out")" -ge 2 ]; }
wait_until 30 "the shell did not start" printed
stop_worker 1
# Statements for a few seconds while worker 1 is down; with one replica
# each, so that the shell has none to restore on worker 1 as it closes
# (which would send it requests of this session, not a backlog).
echo "SET replication = 1;" >&7
for k in 1 2 3; do
  echo "C$k[i,j] = SUM(A[i,k] * A[k,j] * A[k,j]); PRINT C$k[0:1, 0:1];" >&7
done
done3() { grep -c "^384$" "$work/shell.out" | grep -q 3; }
wait_until 120 "statements on the survivor did not finish" done3
TRADB_TEST_TRACE=1 start_worker 1 --threads 1
echo ".workers" >&7
exec 7>&-
set +e; wait $shell; set -e
grep -q "up" "$work/shell.out" || fail ".workers did not run: $(cat "$work/shell.out" "$work/shell.err")"
beats=$(count "got HEARTBEAT (request 0)" "$work/w1.log")
pings=$(count "got HEARTBEAT (request [1-9]" "$work/w1.log")
echo "$TEST: the returning worker got $beats heartbeats and $pings pings"
[ "$beats" -le 1 ] && [ "$pings" -le 2 ] || fail "the returning worker got a backlog: $beats heartbeats, $pings pings"
ok
finish
