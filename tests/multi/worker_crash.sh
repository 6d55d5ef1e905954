#!/usr/bin/env bash
# A local worker that dies in the middle of a statement (here SIGSEGV,
# as a fault in a kernel would send) is reported as such: its log ends
# on a line naming the signal and the stack, the statement fails at once
# with "local worker ... died of signal 11 (Segmentation fault) (see
# .../w0.log)" where it used to wait out the liveness window and say the
# worker was silent, and the stored tensors stay readable in the next
# session.  One killed between statements is named by the next, and
# started again.  Polls
# with deadlines; never sleeps a fixed time to wait for a state.
TEST=worker_crash
source "$TOP_SRCDIR/tests/multi/lib.sh"
db=$work/db
nchunks() { find "$db/workers" -name '*.chk' | wc -l; }

# synchronous = full: each output chunk reaches its file as it is made,
# which is how the test sees the statement under way; layout = declared:
# many output chunks, one after another
"$TRADB" --bail "$db" > "$work/setup.out" 2>&1 <<'SQL' || { cat "$work/setup.out"; fail "set-up failed"; }
SET synchronous = full;
SET layout = declared;
CREATE TENSOR A[1536, 1536] CHUNK [256, 256];
FILL A ONES;
SQL
before=$(nchunks)

# the reference kernels make the product slow enough to catch mid-way
"$TRADB" --backend reference "$db" <<<'C[i,j] = A[i,k] * A[k,j];' > "$work/run.out" 2>&1 &
shell=$!
track "$shell"
writing() { [ "$(nchunks)" -gt "$before" ]; }
wait_until 60 "no output chunk written" writing
w0=$(pgrep -f -- "--listen ipc://$db/workers/w0.ipc") || fail "no local worker 0"
kill -SEGV "$w0"
wait_status 60 "the shell did not end after its worker died" "$shell"
[ $status -ne 0 ] || fail "the statement succeeded without its worker"
grep -q "local worker ipc://$db/workers/w0.ipc died of signal 11 (Segmentation fault) (see $db/workers/w0.log)" \
  "$work/run.out" || fail "the death not reported: $(cat "$work/run.out")"
ok
grep -q "fatal signal 11 (SIGSEGV); its stack:" "$db/workers/w0.log" || fail "worker 0's log does not name its signal"
ok

# what was stored is intact
out=$("$TRADB" --bail "$db" <<<"lo[] = MIN(A[i,j]); hi[] = MAX(A[i,j]); n[] = SUM(A[i,j]) / $((1536 * 1536));
PRINT lo; PRINT hi; PRINT n;" 2>&1) || fail "the next session failed: $out"
[ "$(echo "$out" | grep -v '\[\]' | tr -d ' ' | paste -sd' ')" = "1 1 1" ] || fail "A changed: $out"
ok

# A local worker killed between statements is named, with how it died, by
# the next statement (it used to warn only of replicas missing, after
# waiting out the worker's silence), and started again: it rejoins, its
# lost copies are put back, and the statement's result has its two
# replicas (the session used to go on without it, every chunk it held
# with one replica).  After 3 restarts the session goes on without it.
# The shell reads a FIFO, so that the worker dies while it waits for input.
# fifo_shell NAME STATEMENTS: a shell on db2 reading the FIFO $work/NAME
# (written through fd 7), its output in $work/NAME.out; STATEMENTS sent,
# which end by printing 1, waited for
fifo_shell() {
  mkfifo "$work/$1"
  "$TRADB" "$work/db2" < "$work/$1" > "$work/$1.out" 2>&1 &
  shell=$!
  track "$shell"
  exec 7> "$work/$1"
  printf '%b' "$2" >&7
  fifo_out=$work/$1.out
  printed() { grep -q '^1$' "$fifo_out"; }
  wait_until 60 "the first statements of $1 did not end" printed
}
fifo_shell between 'CREATE TENSOR B[64, 64] CHUNK [16, 16];\nFILL B ONES;\nPRINT B[0, 0];\n'
out2=$work/between.out
w1ep="ipc://$work/db2/workers/w1.ipc"
w1pid() { pgrep -f -- "--listen $w1ep" || true; }
died="warning: local worker $w1ep died of signal 9 (Killed) (see $work/db2/workers/w1.log)"
# kill_between N: SIGKILL worker 1, then run statement S<N> and wait for its sum
kill_between() {
  local w1
  w1=$(w1pid)
  [ -n "$w1" ] || fail "no local worker 1 before kill $1"
  kill -KILL "$w1"
  gone() { local st; st=$(ps -o stat= -p "$w1" || true); [ -z "$st" ] || [[ $st == Z* ]]; } # dead, not yet reaped
  wait_until 30 "worker 1 did not die" gone
  printf 'S%d[] = SUM(B[i, j]);\nPRINT S%d;\n' "$1" "$1" >&7
  summed() { [ "$(count '^4096$' "$out2")" -ge "$1" ]; }
  wait_until 60 "statement S$1 did not end" summed "$1"
  restarted=$(w1pid)
}
kill_between 1
grep -q "line 4: $died; started it again$" "$out2" || fail "the death between statements not named: $(cat "$out2")"
[ -n "$restarted" ] || fail "worker 1 not started again: $(cat "$out2")"
grep -q "fewer than the 2 wanted" "$out2" && fail "S1 under-replicated: $(cat "$out2")"
ok
# its copies of B come back: it holds as many chunks as worker 0
held() {
  printf '.workers\n' >&7
  local last
  last=$(grep -E '^ipc://.*/w[01]\.ipc +up' "$out2" | tail -2 | awk '{print $4}' | sort -u | wc -l)
  [ "$(grep -cE '^ipc://.*/w1\.ipc +up' "$out2")" -gt 0 ] && [ "$last" -eq 1 ]
}
wait_until 30 "worker 1's copies not put back: $(tail -4 "$out2")" held
ok
kill_between 2
kill_between 3
[ "$(count "$died; started it again$" "$out2")" -eq 3 ] || fail "not started again 3 times: $(cat "$out2")"
kill_between 4
grep -q "$died; this session goes on without it$" "$out2" || fail "a 4th restart: $(cat "$out2")"
[ -z "$restarted" ] || fail "worker 1 started a 4th time"
ok
exec 7>&-
done_() { ! kill -0 "$shell" 2>/dev/null; }
wait_until 60 "the shell did not end" done_
wait "$shell" || true

# A worker started again that exits before it answers (here its store is
# a file) is named so, and not started again: it would fail alike.
fifo_shell broken 'PRINT B[0, 0];\n'
out3=$work/broken.out
w1=$(w1pid)
[ -n "$w1" ] || fail "no local worker 1 in the third session"
mv "$work/db2/workers/w1" "$work/db2/workers/w1.away"
echo "not a store" > "$work/db2/workers/w1"
kill -KILL "$w1"
wait_until 30 "worker 1 did not die" gone
printf 'T[] = SUM(B[i, j]);\nPRINT T;\nU[] = SUM(B[i, j]);\nPRINT U;\n' >&7
two() { [ "$(count '^4096$' "$out3")" -ge 2 ]; }
wait_until 60 "T and U did not end" two
grep -q "line 2: $died; started it again$" "$out3" || fail "not started again: $(cat "$out3")"
grep -q "line 2: warning: local worker $w1ep exited with status 1 (see $work/db2/workers/w1.log) before it answered; this session goes on without it$" \
  "$out3" || fail "the failed start not named: $(cat "$out3")"
[ -z "$(w1pid)" ] || fail "worker 1 started again after it failed to start"
[ "$(count "started it again" "$out3")" -eq 1 ] || fail "started more than once: $(cat "$out3")"
ok
exec 7>&-
wait_until 60 "the third shell did not end" done_
finish
