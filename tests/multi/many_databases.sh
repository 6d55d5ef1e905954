#!/usr/bin/env bash
# A worker serves more databases over its life than it holds open at once
# (here 2, idle after 1 s, through the test settings): the store of a
# database no coordinator has used for the idle time is closed when
# another needs its slot, what it held only in memory written first, and
# opened again when asked for, nothing lost, also for a session that waited
# at its prompt meanwhile; with every slot in use, a new database gets a
# clear error and the others are untouched.  Polls with deadlines, never a
# fixed sleep.
TEST=many_databases; source "$TOP_SRCDIR/tests/multi/lib.sh"
for n in 0 1; do TRADB_TEST_MAX_DBS=2 TRADB_TEST_DB_IDLE_S=1 start_worker $n --threads 1; done
W="${ep[0]},${ep[1]}"
db_id() {
  /usr/bin/python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(
    "SELECT value FROM meta WHERE key = '"'db_id'"'").fetchone()[0])' "$work/$1/catalog.db"
}
# session DB SCRIPT: run SCRIPT in a session of DB on workers W, output to
# DB.out; fails the test on any error but a worker saying all its slots
# are in use, which returns 1 (the caller polls)
session() {
  "$TRADB" --workers "${3:-$W}" "$work/$1" <<<"$2" > "$work/$1.out" 2> "$work/$1.err" && return 0
  grep -q "already serves [0-9]* database" "$work/$1.err" || fail "$1: $(cat "$work/$1.err")"
  return 1
}
# make_db DB NAME SEED [WORKERS]: a tensor filled in database DB, its sum
# in DB.sum
make_db() {
  local s="DROP TENSOR IF EXISTS $2; CREATE TENSOR $2[300, 200] CHUNK [100, 100];
FILL $2 UNIFORM(0, 1) SEED $3; s[] = SUM($2[i,j]); PRINT s;"
  wait_until 30 "$1 never opened" session "$1" "$s" "${4:-$W}"
  cp "$work/$1.out" "$work/$1.sum"
}
# same DB NAME [WORKERS]: DB's tensor sums as when it was made
same() {
  wait_until 30 "$1 never opened again" session "$1" "s[] = SUM($2[i,j]); PRINT s;" "${3:-$W}"
  cmp -s "$work/$1.sum" "$work/$1.out" || fail "$1 changed: $(cat "$work/$1.sum") vs $(cat "$work/$1.out")"
}
closed() { count "closing the store of database $1 " "$work/w$2.log"; }

# A third database closes the store idle longest, db1's, once it has been
# idle for a second (until then it is refused, saying why); db1's files
# are all there when it is closed.
make_db db1 A 1
make_db db2 B 2
make_db db3 C 3
id1=$(db_id db1); id2=$(db_id db2); id3=$(db_id db3) # (not while a shell has one open)
for n in 0 1; do
  [ "$(closed "$id1" $n)" -eq 1 ] || fail "worker $n did not close db1's store"
  [ "$(closed "$id2" $n)" -eq 0 ] || fail "worker $n closed db2's store, used after db1's"
  [ "$(nchk "$work/w$n/db-$id1")" -eq 7 ] || fail "worker $n closed db1's store without its 7 chunk files"
done
ok

# Nothing is lost: with every chunk on disk, both workers killed and
# started again, each database reads as it was made.
written() { [ "$(nchk "$work/w$1/db-$2")" -eq 7 ]; }
for n in 0 1; do for d in "$id2" "$id3"; do wait_until 30 "$d's chunk files on worker $n" written $n "$d"; done; done
stop_worker 0; stop_worker 1
for n in 0 1; do TRADB_TEST_MAX_DBS=2 TRADB_TEST_DB_IDLE_S=1 start_worker $n --threads 1; done
same db1 A; same db2 B; same db3 C
ok

# A session waiting at its prompt may have its store closed (nothing of
# a statement lives between statements); its next statement opens it
# again and reads the same (or, while both slots are in use, is refused
# and can be run again).
mkfifo "$work/in"
"$TRADB" --workers "$W" "$work/db2" < "$work/in" > "$work/live.out" 2>&1 &
live=$!; track $live
exec 7> "$work/in"
echo "s[] = SUM(B[i,j]); PRINT s;" >&7
printed() { [ "$(grep -c . "$work/live.out")" -ge "$1" ]; }
wait_until 30 "db2's session printed nothing" printed 2
before=$(closed "$id2" 0)
db2_closed() {
  session db1 "SHOW TENSORS;" || true
  session db3 "SHOW TENSORS;" || true
  [ "$(closed "$id2" 0)" -gt "$before" ]
}
wait_until 30 "db2's store never closed" db2_closed
sums() { grep -cxF "$(tail -1 "$work/db2.sum")" "$work/live.out" || true; }
refusals() { count "already serves" "$work/live.out"; }
answered() { [ "$(sums)" -gt "$1" ] || [ "$(refusals)" -gt "$2" ]; }
live_reads() {
  local s0 r0; s0=$(sums); r0=$(refusals)
  echo "s[] = SUM(B[i,j]); PRINT s;" >&7
  wait_until 30 "db2's session did not answer" answered "$s0" "$r0"
  [ "$(sums)" -gt "$s0" ]
}
wait_until 30 "db2's session never read B again" live_reads
exec 7>&-
wait $live || true # a refused statement makes its exit status 1
[ "$(grep -c "^line" "$work/live.out")" -eq "$(refusals)" ] || fail "db2's session: $(cat "$work/live.out")"
ok

# Every slot in use (one, never idle for long enough): another database
# is refused, saying why, and the one open is untouched.
TRADB_TEST_MAX_DBS=1 TRADB_TEST_DB_IDLE_S=3600 start_worker 2 --threads 1
make_db db6 F 6 "${ep[2]}"
if session db7 "CREATE TENSOR G[10, 10]; FILL G ONES;" "${ep[2]}"; then
  fail "db7 opened with the only slot in use"
fi
grep -q "already serves 1 database, used in the last 3600 s or by a running job" "$work/db7.err" \
  || fail "db7's refusal does not say why: $(cat "$work/db7.err")"
same db6 F "${ep[2]}"
ok
finish
