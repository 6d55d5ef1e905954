#!/usr/bin/env bash
# Two databases on the same three workers keep their chunks apart: opening
# the second (whose catalog lists none of the first's chunks) drops nothing
# of the first, both can work at once, and dropping a tensor in one leaves
# the other's data alone.  Chunk files in the layout before per-database
# stores go to the database that lists them.  Polls with deadlines, never
# a fixed sleep.
TEST=shared_workers; source "$TOP_SRCDIR/tests/multi/lib.sh"
for n in 0 1 2; do start_worker $n --threads 1; done
W="${ep[0]},${ep[1]},${ep[2]}"
dirs=("$work/w0" "$work/w1" "$work/w2")

"$TRADB" --workers "$W" "$work/db1" <<'EOF2' > "$work/s1.out" || fail "db1 set-up failed"
SET replication = 3;
CREATE TENSOR A[256, 256] CHUNK [64, 64];
FILL A UNIFORM(0, 1) SEED 3;
s[] = SUM(A[i,j]);
PRINT s;
EOF2
# A's 16 chunks on 3 workers reach their files in the background
# (SET synchronous = normal)
all_written() { [ "$(nchk "${dirs[@]}")" -ge 48 ]; }
wait_until 30 "expected db1's 48 chunk files on the workers, found $(nchk "${dirs[@]}")" all_written
held=$(nchk "${dirs[@]}")

# A second database on the same workers: nothing of db1 goes.
"$TRADB" --workers "$W" "$work/db2" <<<'SHOW TENSORS; CREATE TENSOR B[128, 128] CHUNK [32, 32]; FILL B ONES;' \
  || fail "db2 failed"
after=$(nchk "${dirs[@]}")
[ "$after" -ge "$held" ] || fail "db1 lost chunk files when db2 opened: $held before, $after after"
out=$("$TRADB" --workers "$W" "$work/db1" <<<'s[] = SUM(A[i,j]); PRINT s;') || fail "db1 unreadable after db2 opened"
[ "$out" = "$(cat "$work/s1.out")" ] || fail "db1 changed: '$out' vs '$(cat "$work/s1.out")'"
ok

# Both at once: each shell's clean-up of its own leftovers spares the other.
"$TRADB" --workers "$W" "$work/db1" <<<'C[i,j] = A[i,k] * A[k,j]; t[] = SUM(C[i,j]); PRINT t;' > "$work/c1.out" 2>&1 &
s1=$!; track $s1
"$TRADB" --workers "$W" "$work/db2" <<<'D[i,j] = B[i,k] * B[k,j]; u[] = SUM(D[i,j]); PRINT u; DROP TENSOR B;' > "$work/c2.out" 2>&1 &
s2=$!; track $s2
wait $s1 || fail "db1 statement failed next to db2: $(cat "$work/c1.out")"
wait $s2 || fail "db2 statement failed next to db1: $(cat "$work/c2.out")"
grep -q "^2.09715e+06$" "$work/c2.out" || fail "db2 wrong result: $(cat "$work/c2.out")"
out=$("$TRADB" --workers "$W" "$work/db1" <<<'s[] = SUM(A[i,j]); PRINT s; t[] = SUM(C[i,j]); PRINT t;') \
  || fail "db1 unreadable after both ran"
[ "$(echo "$out" | head -2)" = "$(cat "$work/s1.out")" ] || fail "db1's A changed: $out"
[ "$(echo "$out" | tail -2)" = "$(cat "$work/c1.out")" ] || fail "db1's C changed: $out"
ok

# Every worker kept the two databases in separate places.
for n in 0 1 2; do
  [ "$(find "$work/w$n" -mindepth 1 -maxdepth 1 -type d -name 'db-*' | wc -l)" -eq 2 ] \
    || fail "worker $n does not keep one store per database"
done
ok

# A worker whose data directory still has chunk files in its top level
# (the layout before per-database stores) serves them to the database
# that lists them, moved into that database's store; no other database
# sees or drops them.
stop_worker 0 TERM
id1=$(/usr/bin/python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(
  "SELECT value FROM meta WHERE key = '"'db_id'"'").fetchone()[0])' "$work/db1/catalog.db")
[ -d "$work/w0/db-$id1" ] || fail "no store for db1 ($id1) on worker 0"
mv "$work/w0/db-$id1"/*.chk "$work/w0/"
rm -rf "$work/w0/db-$id1"
old=$(find "$work/w0" -maxdepth 1 -name '*.chk' | wc -l)
[ "$old" -gt 0 ] || fail "worker 0 held no chunk to move"
start_worker 0 --threads 1
"$TRADB" --workers "$W" "$work/db2" <<<'SHOW TENSORS;' > /dev/null || fail "db2 failed"
[ "$(find "$work/w0" -maxdepth 1 -name '*.chk' | wc -l)" -eq "$old" ] || fail "db2 took or dropped chunks that are not its own"
stop_worker 1; stop_worker 2
out=$("$TRADB" --workers "$W" "$work/db1" <<<'s[] = SUM(A[i,j]); PRINT s; t[] = SUM(C[i,j]); PRINT t;' 2> "$work/old.err") \
  || fail "db1's chunks in the old layout are not served: $(cat "$work/old.err")"
[ "$out" = "$(cat "$work/s1.out" "$work/c1.out")" ] || fail "db1 changed: $out"
[ "$(find "$work/w0" -maxdepth 1 -name '*.chk' | wc -l)" -lt "$old" ] || fail "nothing moved into db1's store"
grep -q "into its own store" "$work/w0.log" || fail "the worker did not say it moved chunks"
ok
finish
