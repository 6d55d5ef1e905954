#!/usr/bin/env bash
# A disk that fills up under synchronous = normal loses nothing that
# committed.  Outputs are held in the workers' memory and written in the
# background; a worker whose disk has no room for a chunk beyond those it
# holds unwritten writes it at once instead, so a statement whose output
# cannot reach the disk fails then, naming the full disk, and leaves the
# previous version, where it used to commit and lose its chunks (and the
# version it replaced) when the shell closed.
# Runs where this machine lets the test mount a small tmpfs.
TEST=disk_full; source "$TOP_SRCDIR/tests/multi/lib.sh"

mnt=$work/small
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=24m tmpfs "$mnt" 2>/dev/null; then
  echo "$TEST: cannot mount a tmpfs here: not run"
  finish
  exit 0
fi
mounts+=("$mnt")
db=$mnt/db
run() { "$TRADB" --local-workers 2 "$db" 2>&1; }
# Another tenant of the disk leaves it 1 MiB free (or KIB KiB).
fill_disk() {
  local avail; avail=$(df --output=avail -B1 "$mnt" | tail -1)
  fallocate -l $((avail - ${1:-1024} * 1024)) "$mnt/filler" || fail "cannot fill the tmpfs"
}
# session NAME STATEMENTS VALUE: a session reading $work/NAME.in (written
# through descriptor 3) into $work/NAME.out, its pid in $batch, given
# STATEMENTS; returns once the last line printed is VALUE.
session() {
  mkfifo "$work/$1.in"
  "$TRADB" --local-workers 2 "$db" < "$work/$1.in" > "$work/$1.out" 2>&1 &
  batch=$!
  track $batch
  exec 3> "$work/$1.in"
  echo "$2" >&3
  printed_() { [ "$(tail -1 "$work/$1.out")" = "$2" ]; }
  wait_until 60 "the session's first output" printed_ "$1" "$3"
}
# fails STATEMENTS WHAT: the statements must fail; their output in $out.
fails() {
  set +e
  out=$(run <<<"$1")
  local rc=$?
  set -e
  [ $rc -ne 0 ] || fail "$2 committed: $out"
}
# S must read as its first version, all ones.
s_intact() {
  out=$(run <<<'s[] = SUM(S[i,j]); PRINT s;') || fail "S unreadable after the full disk: $out"
  [ "$(echo "$out" | tail -1)" = "262144" ] || fail "S is not its version before the full disk: $out"
}

# R must read as its first version, all ones.
r_intact() {
  out=$(run <<<'r[] = SUM(R[i]); PRINT r;') || fail "R unreadable after the full disk: $out"
  [ "$(echo "$out" | tail -1)" = "512" ] || fail "R is not its version before the full disk: $out"
}

# S: 1 MiB; R: 512 chunks of one value, each a file of its own (4 KiB on
# this disk for 4 bytes of value); two replicas of each on the small disk.
out=$(run <<<'CREATE TENSOR S[512, 512] CHUNK [128, 512] TYPE f32; FILL S ONES;
              CREATE TENSOR R[512] CHUNK [1]; FILL R ONES;') || fail "set-up: $out"
out=$("$TRADB" -c "CREATE TENSOR b[2048, 2048]; FILL b ONES; SAVE b TO '$work/big.npy';" 2>&1) \
  || fail "a 16 MiB .npy: $out"

# An output that cannot fit the disk at all is refused before anything
# is written, naming the sizes: T's two replicas (2 MiB) against the 1
# MiB left, a FILL of 16 MiB, a LOAD of a 16 MiB file.
fill_disk
fails 'T[i,j] = S[i,j] * 2;' "a statement whose output cannot fit the disk"
echo "$out" | grep -q "T would take 2 MiB on the workers' disks (2 copies of 1 MiB), more than the .* free there" \
  || fail "the sizes not named: $out"
fails 'BEGIN; T[i,j] = S[i,j] * 2; T2[i] = SUM(S[i,j]); COMMIT;' "a block whose outputs cannot fit the disk"
echo "$out" | grep -q "the block's outputs would take .* (the block committed nothing)" \
  || fail "the block's sizes, or that it committed nothing, not said: $out"
fails 'CREATE TENSOR H[2048, 2048]; FILL H ONES;' "a FILL that cannot fit the disk"
echo "$out" | grep -q "H would take 32 MiB" || fail "the FILL's size not named: $out"
fails "LOAD B FROM '$work/big.npy';" "a LOAD that cannot fit the disk"
echo "$out" | grep -q "B would take 32 MiB" || fail "the LOAD's size not named: $out"
ok

# One that fits by its values but not by its files (512 files, 2 KiB of
# values) fails when the disk is full, naming it, and commits nothing.
fails 'CREATE TENSOR t[512] CHUNK [1]; t[i] = SUM(S[i,j]);' "a statement whose output cannot reach the full disk"
echo "$out" | grep -q "No space left on device" || fail "the full disk not named: $out"
ok

# The disk has room again: S reads whole, T and B are no tensors, and t
# reads as declared (zeros).
rm -f "$mnt/filler"
s_intact
fails 'PRINT T[0, 0];' "reading T"
echo "$out" | grep -q "no such tensor" || fail "T, its statement refused, is a tensor: $out"
fails 'PRINT B[0, 0];' "reading B"
out=$(run <<<'z[] = SUM(t[i] == 0); PRINT z;') || fail "t unreadable: $out"
[ "$(echo "$out" | tail -1)" = "512" ] || fail "t holds what its failed statement made: $out"
ok

# Filled to the same point while R is replaced in place: the statement
# fails and R keeps the version before.
fill_disk
fails 'R[i] = R[i] * 2;' "a replacement whose output cannot reach the full disk"
echo "$out" | grep -q "No space left on device" || fail "the full disk not named: $out"
rm -f "$mnt/filler"
r_intact
ok

# The disk fills after a statement's chunks were held in memory (another
# program writes; the workers' background writes held back so that it
# comes first), and the session ends.  At a terminal the shell says what
# it cannot write and waits: the user frees room, presses Enter, and
# nothing is lost.  (A worker holds chunks in memory only while its disk
# has room for them and 64 MiB more: a larger tmpfs.)
mnt=$work/big
mkdir -p "$mnt"
mount -t tmpfs -o size=100m tmpfs "$mnt" || fail "cannot mount the second tmpfs"
mounts+=("$mnt")
db=$mnt/db
out=$(run <<<'CREATE TENSOR S[512, 512] CHUNK [128, 512] TYPE f32; FILL S ONES;') || fail "set-up: $out"
export TRADB_TEST_WRITEBACK_S=-1
cat > "$work/held.pty" <<EOF
send U[i,j] = S[i,j] * 3;\n
expect tradb>
run avail=\$(df --output=avail -B1 $mnt | tail -1); fallocate -l \$((avail - 1024 * 1024)) $mnt/filler
send \x04
expect No space left on device.*Free room and press Enter to try again
run rm -f $mnt/filler
send \n
exits
EOF
/usr/bin/python3 "$TOP_SRCDIR/tests/multi/pty_shell.py" "$work/held.pty" -- "$TRADB" --local-workers 2 "$db" \
  || fail "the interactive session's close with a full disk"
out=$(run <<<'u[] = SUM(U[i,j]); PRINT u;') || fail "U unreadable after room was freed at the close: $out"
[ "$(echo "$out" | tail -1)" = "786432" ] || fail "U is not whole: $out"
ok

# In batch the shell cannot wait: it warns that what could not be written
# is lost, and exits with 1 though every statement succeeded.
session lost 'V[i,j] = S[i,j] * 5; PRINT V[0, 0];' 5
fill_disk
exec 3>&-
wait_status 60 "the batch session's end" $batch
out=$(cat "$work/lost.out")
[ "$status" -eq 1 ] || fail "a close that lost chunks held in memory exited with $status: $out"
echo "$out" | grep -q "did not write all they hold in memory only: .*No space left on device" \
  || fail "the loss not named: $out"
echo "$out" | grep -q "what they could not write is lost" || fail "the loss not said: $out"
rm -f "$mnt/filler"
ok

# The disk fills while the session goes on: the first statement whose
# tasks run after a worker's background write failed warns, naming the
# disk's error, and once room is freed and the held chunks are written,
# a statement says so; nothing is lost.  (Background writes 3 s after
# the put: the disk is filled before, leaving 512 KiB, room for the
# catalog's commits and a scalar's file but not for all of W's chunks.)
export TRADB_TEST_WRITEBACK_S=3
session warned 'W[i,j] = S[i,j] * 7; PRINT W[0, 0];' 7
fill_disk 512
# said_ TEXT: the output says TEXT; else, at most once a second (the
# background writes wait while the machine works), one more statement
# that runs tasks on the workers
sent=0
said_() {
  grep -q "$1" "$work/warned.out" && return 0
  local now; now=$(date +%s%N)
  if [ $((now - sent)) -ge 1000000000 ]; then
    echo 'x[] = SUM(S[i,j]);' >&3
    sent=$now
  fi
  return 1
}
trouble_() { said_ "cannot write what it holds in memory only to its disk (.*No space left on device)"; }
wait_until 60 "the warning of failing background writes" trouble_
rm -f "$mnt/filler"
again_() { said_ "writes to its disk again"; }
wait_until 90 "the notice that background writes succeed again" again_
exec 3>&-
wait_status 60 "the session's end" $batch
[ "$status" -eq 0 ] || fail "the session whose held chunks were written in the end exited with $status: $(cat "$work/warned.out")"
unset TRADB_TEST_WRITEBACK_S
out=$(run <<<'w[] = SUM(W[i,j] == 7); PRINT w;') || fail "W unreadable: $out"
[ "$(echo "$out" | tail -1)" = "262144" ] || fail "W is not whole: $out"
ok

# Remote workers say their free space (HELLO_OK, each task's reply): the
# shell refuses what cannot fit their disks (here a 24 MiB tmpfs each),
# and asks them again before it refuses on what they said earlier.
for n in 0 1; do
  mkdir -p "$work/w$n"
  mount -t tmpfs -o size=24m tmpfs "$work/w$n" || fail "cannot mount worker $n's tmpfs"
  mounts+=("$work/w$n")
done
start_worker 0 --threads 1
start_worker 1 --threads 1
rdb=$work/rdb
rrun() { "$TRADB" --workers "${ep[0]},${ep[1]}" "$rdb" 2>&1; }
set +e
out=$(rrun <<<'CREATE TENSOR u[4096]; FILL u ONES; V[i,j] = u[i]*u[j];')
set -e
echo "$out" | grep -q "V would take 128 MiB on the workers' disks (2 copies of 64 MiB), more than the .* free there" \
  || fail "an output too large for the remote workers' disks not refused: $out"
# A session's task replies see both disks nearly full; room is freed; a
# statement that fits only the disks as they are now runs.
exec 3>&-
session_remote() {
  mkfifo "$work/remote.in"
  "$TRADB" --workers "${ep[0]},${ep[1]}" "$rdb" < "$work/remote.in" > "$work/remote.out" 2>&1 &
  batch=$!
  track $batch
  exec 3> "$work/remote.in"
}
session_remote
echo 'CREATE TENSOR S2[1024, 512] CHUNK [256, 512]; FILL S2 ONES; PRINT S2[0, 0];' >&3
last_is_() { [ "$(tail -1 "$work/remote.out")" = "$1" ]; }
wait_until 60 "S2 made on the remote workers" last_is_ 1
for n in 0 1; do
  avail=$(df --output=avail -B1 "$work/w$n" | tail -1)
  fallocate -l $((avail - 1024 * 1024)) "$work/w$n/filler" || fail "cannot fill worker $n's tmpfs"
done
echo 'y[i] = SUM(S2[i,j]); PRINT y[0];' >&3
wait_until 60 "tasks' replies with the full disks" last_is_ 512
rm -f "$work/w0/filler" "$work/w1/filler"
echo 'T2[i,j] = S2[i,j] + 1; PRINT T2[0, 0];' >&3
exec 3>&-
wait_status 60 "the remote session's end" $batch
[ "$status" -eq 0 ] || fail "refused on the workers' old word: $(cat "$work/remote.out")"
last_is_ 2 || fail "T2 not made: $(cat "$work/remote.out")"
ok

finish
