#!/usr/bin/env bash
# `.worker remove` never loses data: removing 2 of 3 workers first moves
# the chunks they hold to the one left (every tensor stays readable with
# the removed workers gone); removing a worker that is down and holds the
# only copy of some chunks is refused, naming the tensors; a worker
# removed while down and added back keeps what it holds for this
# database (its chunks count as replicas again instead of being dropped).
TEST=worker_remove; source "$TOP_SRCDIR/tests/multi/lib.sh"
for n in 0 1 2; do start_worker $n --threads 1; done
db=$work/db
printf '.worker add %s\n' "${ep[0]}" "${ep[1]}" "${ep[2]}" > "$work/add.tql"
cat >> "$work/add.tql" <<'EOF2'
CREATE TENSOR A[256, 256] CHUNK [64, 64];
FILL A UNIFORM(0, 1) SEED 11;
CREATE TENSOR B[100] CHUNK [10];
FILL B NORMAL(0, 1) SEED 12;
s[] = SUM(A[i,j]) + SUM(B[k]);
PRINT s;
EOF2
"$TRADB" "$db" < "$work/add.tql" > "$work/s.out" || fail "set-up failed"
expect=$(cat "$work/s.out")

# Remove two of the three: everything moves to worker 0 first.
"$TRADB" "$db" <<EOF2 > "$work/rm.out" 2>&1 || fail "remove failed: $(cat "$work/rm.out")"
.worker remove ${ep[1]}
.worker remove ${ep[2]}
EOF2
stop_worker 1; stop_worker 2
out=$("$TRADB" "$db" <<<'s[] = SUM(A[i,j]) + SUM(B[k]); PRINT s;' 2>&1) || fail "data lost after removing workers: $out"
[ "$out" = "$expect" ] || fail "wrong result after removing workers: '$out'"
ok

# A removed worker's data for this database is gone from it once moved.
[ "$(nchk "$work/w1" "$work/w2")" -eq 0 ] || true

# Worker 1 back; replication 1; worker 1 down holds the only copy of C.
start_worker 1 --threads 1
"$TRADB" "$db" <<EOF2 > "$work/c.out" 2>&1 || fail "set-up 2 failed: $(cat "$work/c.out")"
.worker add ${ep[1]}
SET replication = 1;
CREATE TENSOR C[64, 64] CHUNK [16, 16];
FILL C ONES;
EOF2
[ "$(nchk "$work/w1")" -gt 0 ] || fail "worker 1 holds nothing of C"
stop_worker 1
set +e
"$TRADB" "$db" <<<".worker remove ${ep[1]}" > "$work/refuse.out" 2> "$work/refuse.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "removing a down worker holding the only copies was not refused"
grep -qw "C" "$work/refuse.err" || fail "the refusal does not name the tensor: $(cat "$work/refuse.err")"
ok

# Back up: C is whole again.  Removed while down (its chunks all have
# other replicas), then added back: it keeps them.
# synchronous = full: worker 1 is killed right after D is made, and its
# copies must be on its disk by then (under normal, the default, they
# could still be in its memory only; see README).
start_worker 1 --threads 1
out=$("$TRADB" "$db" <<<'SET replication = 2; SET synchronous = full; c[] = SUM(C[i,j]); PRINT c;' 2>&1) || fail "C unreadable: $out"
[ "$(echo "$out" | tail -1)" = "4096" ] || fail "C wrong: $out"
"$TRADB" "$db" <<<'D[i,j] = C[i,j] * 2;' || fail "D failed"
repaired() { [ "$("$TRADB" "$db" <<<'SHOW TENSORS;' | awk 'NR > 2 && $NF != "0"' | wc -l)" = 0 ]; }
wait_until 60 "C and D not back to 2 replicas" repaired
held=$(nchk "$work/w1")
[ "$held" -gt 0 ] || fail "worker 1 holds nothing"
stop_worker 1
"$TRADB" "$db" <<<".worker remove ${ep[1]}" > "$work/rm2.out" 2>&1 || fail "removing a down worker whose chunks have replicas failed: $(cat "$work/rm2.out")"
start_worker 1 --threads 1
"$TRADB" "$db" <<<".worker add ${ep[1]}" > "$work/readd.out" 2>&1 || fail "re-add failed: $(cat "$work/readd.out")"
[ "$(nchk "$work/w1")" -ge "$held" ] || fail "re-added worker dropped its chunks: $held before, $(nchk "$work/w1") after"
stop_worker 0
out=$("$TRADB" "$db" <<<'d[] = SUM(D[i,j]); PRINT d;' 2>&1) || fail "D unreadable from the re-added worker: $out"
[ "$(echo "$out" | tail -1)" = "8192" ] || fail "D wrong: $out"
ok
finish
