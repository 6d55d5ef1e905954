#!/usr/bin/env bash
# A statement's clean-up takes no round trip of its own: the copies it
# moved, the partials of its two-phase aggregation and the version its
# output replaced are dropped together, each worker sent one DROP for
# them all, with the next statement's ping.
# Nothing is left behind and nothing the catalog lists is dropped: the
# chunk files are those of the tensors alone, and the output reads the
# same after it was replaced.  Workers trace the requests they get
# (TRADB_TEST_TRACE).
TEST=cleanup; source "$TOP_SRCDIR/tests/multi/lib.sh"
for n in 0 1 2; do TRADB_TEST_TRACE=1 TRADB_TEST_FS=fs-$n start_worker $n --threads 1; done
W="${ep[0]},${ep[1]},${ep[2]}"
mkfifo "$work/in"
"$TRADB" --workers "$W" "$work/db" < "$work/in" > "$work/shell.out" 2> "$work/shell.err" &
shell=$!; track $shell
exec 7> "$work/in"
# synchronous = full, each worker on a file system of its own
# (TRADB_TEST_FS): every copy is in its chunk file when the statement
# ends, so the files show what the workers keep.  In the declared
# chunking the shapes make the optimizer broadcast B and sum partials in a
# second phase (EXPLAIN says so below): the statement has scratch of both
# kinds to drop.
cat >&7 <<'EOF'
SET synchronous = full;
SET replication = 2;
SET layout = declared;
CREATE TENSOR A[256, 8192] CHUNK [256, 2048];
CREATE TENSOR B[8192, 32] CHUNK [8192, 8];
FILL A UNIFORM(-1, 1) SEED 1;
FILL B UNIFORM(-1, 1) SEED 2;
EXPLAIN C[i,j] = tanh(SUM(A[i,k] * B[k,j]));
C[i,j] = tanh(SUM(A[i,k] * B[k,j]));
PRINT C[0:1, 0:3];
EOF
printed() { [ "$(grep -c "^C\[0:1, 0:3\]" "$work/shell.out")" -ge "$1" ]; }
wait_until 60 "the first statement did not finish" printed 1
grep -q "bcast B" "$work/shell.out" && grep -q "2-phase" "$work/shell.out" ||
  fail "the plan moves no copies or has no second phase: $(grep "IA plan" "$work/shell.out")"
drops() { local n t=0; for n in 0 1 2; do echo -n "$(count "got DROP" "$work/w$n.log") "; done; }
files() { find "$work"/w[012] -name '*.chk' | wc -l; }
d1=$(drops); f1=$(files)
echo "C[i,j] = tanh(SUM(A[i,k] * B[k,j])); PRINT C[0:1, 0:3];" >&7
wait_until 60 "the second statement did not finish" printed 2
d2=$(drops); f2=$(files)
exec 7>&-
set +e; wait $shell; rc=$?; set -e
[ $rc -eq 0 ] || fail "the shell failed: $(cat "$work/shell.err")"
read -r -a a1 <<<"$d1"; read -r -a a2 <<<"$d2"
echo "$TEST: DROP requests per worker before the second statement: $d1, after: $d2"
for n in 0 1 2; do
  [ $((a2[n] - a1[n])) -eq 1 ] ||
    fail "worker $n got $((a2[n] - a1[n])) DROP requests for one statement, not one"
done
ok
# ... and in one round trip: a phase's requests take consecutive ids, and
# the next phase starts after a gap (dist/rpc.c), so the three DROPs have
# ids n, n+1, n+2 when they went together.
last() { grep -o "got DROP (request [0-9]*" "$work/w$1.log" | tail -1 | grep -o "[0-9]*$"; }
ids=$(for n in 0 1 2; do last $n; done | sort -n)
[ $(( $(echo "$ids" | tail -1) - $(echo "$ids" | head -1) )) -eq 2 ] ||
  fail "the last DROPs went in more than one round trip: request ids $(echo $ids)"
ok
# ... with the ping before the next statement (the PRINT): its heartbeats,
# one a worker in order, take the ids just before them.
lo=$(echo "$ids" | head -1)
for n in 0 1 2; do
  grep -q "got HEARTBEAT (request $((lo - 3 + n)))" "$work/w$n.log" ||
    fail "worker $n's DROP (request $lo on) did not follow the ping's heartbeat $((lo - 3 + n))"
done
ok
# A 4 chunks, B 4 and C 4 (B's column blocks, the declared chunking),
# two replicas each: the replaced version's files are gone, and no moved
# copy or partial reached a file.
[ "$f1" -eq 24 ] && [ "$f2" -eq 24 ] || fail "chunk files: $f1 after the first statement, $f2 after the second, not 24"
ok
values=$(grep -A1 "^C\[0:1, 0:3\]" "$work/shell.out" | grep -v "^C\[" | grep -v "^--")
[ "$(echo "$values" | sort -u | wc -l)" -eq 1 ] && [ "$(echo "$values" | wc -l)" -eq 2 ] ||
  fail "C read differently after it was replaced: $values"
ok
finish
