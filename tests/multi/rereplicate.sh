#!/usr/bin/env bash
# Replication is restored: a statement that commits while a worker is down
# warns that its output has fewer replicas than the setting, SHOW TENSORS
# says which tensors are under-replicated, and once the worker is back the
# missing replicas are made, by the next session before it ends, so that
# losing the others later loses nothing.  SET replication above the number of workers says what can be
# held.
TEST=rereplicate; source "$TOP_SRCDIR/tests/multi/lib.sh"
for n in 0 1 2; do start_worker $n --threads 1; done
W="${ep[0]},${ep[1]},${ep[2]}"
db=$work/db
"$TRADB" --workers "$W" "$db" <<<'SET replication = 3; CREATE TENSOR A[128, 128] CHUNK [32, 32]; FILL A ONES;' \
  || fail "set-up failed"
stop_worker 2
"$TRADB" --workers "$W" "$db" <<<'B[i,j] = A[i,j] * 5;' > "$work/b.out" 2> "$work/b.err" || fail "B failed: $(cat "$work/b.err")"
grep -qi "replica" "$work/b.err" || fail "no warning about fewer replicas: '$(cat "$work/b.err")'"
"$TRADB" --workers "$W" "$db" <<<'SHOW TENSORS;' > "$work/show.out" 2>&1 || fail "SHOW failed"
grep -q "under" "$work/show.out" || fail "SHOW TENSORS does not say B is under-replicated: $(cat "$work/show.out")"
ok

# Back, but slow to store (50 ms a chunk), with repair copying one 4 KiB
# chunk a round: B's 16 missing copies take longer than the slice of
# repair a statement gets.  One session of one statement still restores
# them all before it ends, where it used to leave most for later sessions.
export TRADB_TEST_SLOW_STORE_MS=50
start_worker 2 --threads 1
unset TRADB_TEST_SLOW_STORE_MS
TRADB_TEST_REPAIR_BYTES=4096 "$TRADB" --workers "$W" "$db" <<<'SHOW TENSORS;' > "$work/one.out" 2>&1 \
  || fail "the session after the worker came back failed: $(cat "$work/one.out")"
grep -q "^B .* 16$" "$work/one.out" || fail "B was not under-replicated as the session opened: $(cat "$work/one.out")"
short=$("$TRADB" --workers "$W" "$db" <<<'SHOW TENSORS;' | awk 'NR > 2 && $1 == "B" {print $NF}')
[ "$short" = 0 ] || fail "B not re-replicated when the session ended: $short chunks short"
ok

# Now B lives on all three: any one worker alone serves it.
stop_worker 0; stop_worker 1
out=$("$TRADB" --workers "$W" "$db" <<<'b[] = SUM(B[i,j]); PRINT b;' 2>&1) || fail "B lost: $out"
[ "$(echo "$out" | tail -1)" = "81920" ] || fail "B wrong: $out"
ok

# SET replication = 3 with two workers.
start_worker 3 --threads 1; start_worker 4 --threads 1
out=$("$TRADB" --workers "${ep[3]},${ep[4]}" "$work/db2" <<<'SET replication = 3;' 2>&1) || fail "SET failed: $out"
grep -q "2" <<<"$out" || fail "SET replication = 3 on 2 workers says nothing: '$out'"
ok
finish
