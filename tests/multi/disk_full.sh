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
# Another tenant of the disk leaves it 1 MiB free.
fill_disk() {
  local avail; avail=$(df --output=avail -B1 "$mnt" | tail -1)
  fallocate -l $((avail - 1024 * 1024)) "$mnt/filler" || fail "cannot fill the tmpfs"
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

# S: 1 MiB, two replicas on the small disk.
out=$(run <<<'CREATE TENSOR S[512, 512] CHUNK [128, 512] TYPE f32; FILL S ONES;') || fail "set-up: $out"

# T's two replicas (2 MiB) do not fit the 1 MiB left.
fill_disk
fails 'T[i,j] = S[i,j] * 2;' "a statement whose output cannot reach the full disk"
echo "$out" | grep -q "No space left on device" || fail "the full disk not named: $out"
ok

# The disk has room again: S reads whole, and T, which did not commit,
# is not a tensor (it was one whose every chunk was lost).
rm -f "$mnt/filler"
s_intact
fails 'PRINT T[0, 0];' "reading T"
echo "$out" | grep -q "no such tensor" || fail "T, its statement failed, is a tensor: $out"
ok

# Filled to the same point while S is replaced in place: the statement
# fails and S keeps the version before.
fill_disk
fails 'S2[i,j] = S[i,j] + S[i,j]; S[i,j] = S2[i,j] * 2;' "statements whose outputs cannot reach the full disk"
rm -f "$mnt/filler"
s_intact
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
mkfifo "$work/in"
"$TRADB" --local-workers 2 "$db" < "$work/in" > "$work/out" 2>&1 &
batch=$!
track $batch
exec 3> "$work/in"
echo 'V[i,j] = S[i,j] * 5; PRINT V[0, 0];' >&3
printed_() { [ "$(tail -1 "$work/out")" = "5" ]; }
wait_until 60 "V's first value printed" printed_
fill_disk
exec 3>&-
wait_status 60 "the batch session's end" $batch
[ "$status" -eq 1 ] || fail "a close that lost chunks held in memory exited with $status: $(cat "$work/out")"
grep -q "did not write all they hold in memory only: .*No space left on device" "$work/out" \
  || fail "the loss not named: $(cat "$work/out")"
grep -q "what they could not write is lost" "$work/out" || fail "the loss not said: $(cat "$work/out")"
rm -f "$mnt/filler"
unset TRADB_TEST_WRITEBACK_S
ok

finish
