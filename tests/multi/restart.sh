#!/usr/bin/env bash
# A worker that restarts in the middle of a statement (killed and started
# again on the same endpoint within the liveness window, as a supervisor
# would) stops that statement at once: the new process heartbeats, but the
# requests the old one held are lost and must not be waited for.  The
# statement then runs again, with the restarted worker back, and says why
# (it used to fail, naming the worker).
TEST=restart; source "$TOP_SRCDIR/tests/multi/lib.sh"
for n in 0 1; do start_worker $n --threads 1; done
W="${ep[0]},${ep[1]}"
db=$work/db
# declared layout: the three-factor product is one long join, not split
"$TRADB" --workers "$W" "$db" <<<'SET layout = declared; CREATE TENSOR A[1024, 1024] CHUNK [512, 512]; FILL A ONES;' \
  || fail "set-up failed"
# A liveness window of 6 s: on a loaded machine the kill and the new
# process's start took over the usual 1.5 s, and the worker was taken for
# down before its restart could be seen.
TRADB_TEST_LIVENESS_S=6 "$TRADB" --workers "$W" --backend reference "$db" \
  <<<'C[i,j] = SUM(A[i,k] * A[k,j] * A[k,j]);' \
  > "$work/run.out" 2> "$work/run.err" &
shell=$!; track $shell
busy() { [ "$(count "hello" "$work/w1.log")" -ge 2 ] && [ "$(ps -o %cpu= -p "${wpid[1]}" | cut -d. -f1)" -gt 10 ]; }
wait_until 60 "the statement did not start" busy
stop_worker 1
start_worker 1 --threads 1
t0=$SECONDS
done_() { ! kill -0 $shell 2>/dev/null; }
wait_until 30 "the shell still waits for the restarted worker" done_
wait $shell || fail "the statement failed across a worker restart: $(cat "$work/run.err")"
grep -q "warning: worker ${ep[1]} restarted while it worked for this statement; the statement ran again" \
  "$work/run.err" || fail "the restart not named: $(cat "$work/run.err")"
echo "$TEST: the statement ended $((SECONDS - t0)) s after the restart: $(cat "$work/run.err")"
ok
out=$("$TRADB" --workers "$W" "$db" <<<'e[] = MAX(ABS(C[i,j] - 1024)); PRINT e;' 2>&1) || fail "reading C failed: $out"
[ "$out" = $'e[] (f32)\n0' ] || fail "C is not what the product gives: $out"
ok
out=$("$TRADB" --workers "$W" "$db" <<<'s[] = SUM(A[i,j]); PRINT s;' 2>&1) || fail "next statement failed: $out"
[ "$out" = $'s[] (f32)\n1.04858e+06' ] || fail "wrong result: $out"
ok
finish
