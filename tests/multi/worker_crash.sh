#!/usr/bin/env bash
# A local worker that dies in the middle of a statement (here SIGSEGV,
# as a fault in a kernel would send) is reported as such: its log ends
# on a line naming the signal and the stack, the statement fails at once
# with "local worker ... died of signal 11 (Segmentation fault) (see
# .../w0.log)" where it used to wait out the liveness window and say the
# worker was silent, and the stored tensors stay readable in the next
# session.  One killed between statements is named by the next.  Polls
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
done_() { ! kill -0 "$shell" 2>/dev/null; }
wait_until 60 "the shell did not end after its worker died" done_
set +e
wait "$shell"
rc=$?
set -e
[ $rc -ne 0 ] || fail "the statement succeeded without its worker"
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
# waiting out the worker's silence): the shell reads a FIFO, so that the
# worker dies while it waits for input.
mkfifo "$work/in"
"$TRADB" "$work/db2" < "$work/in" > "$work/between.out" 2>&1 &
shell=$!
track "$shell"
exec 7> "$work/in"
printf 'CREATE TENSOR B[64, 64];\nFILL B ONES;\nPRINT B[0, 0];\n' >&7
printed() { grep -q '^1$' "$work/between.out"; }
wait_until 60 "the first statements did not end" printed
w1=$(pgrep -f -- "--listen ipc://$work/db2/workers/w1.ipc") || fail "no local worker 1"
kill -KILL "$w1"
gone() { local st; st=$(ps -o stat= -p "$w1" || true); [ -z "$st" ] || [[ $st == Z* ]]; } # dead, not yet reaped
wait_until 30 "worker 1 did not die" gone
printf 'S[] = SUM(B[i, j]);\nPRINT S;\n' >&7
exec 7>&-
done_() { ! kill -0 "$shell" 2>/dev/null; }
wait_until 60 "the shell did not end" done_
wait "$shell" || true
grep -q "line 4: warning: local worker ipc://$work/db2/workers/w1.ipc died of signal 9 (Killed)" \
  "$work/between.out" || fail "the death between statements not named: $(cat "$work/between.out")"
grep -q '^4096$' "$work/between.out" || fail "the statement after it failed: $(cat "$work/between.out")"
ok
finish
