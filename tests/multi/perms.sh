#!/usr/bin/env bash
# Data safety on disk: under umask 000 and 022 a database, named or
# transient, with its local workers (their logs, chunk stores and ipc
# sockets) is its owner's alone: directories 0700, everything else 0600.
# A database left 0755 by an older tradb is tightened when opened; a
# directory of the user's without a catalog keeps its mode.  A worker and
# a shell refuse a cluster.key that its group may read.  A worker sent
# garbage logs one line for a peer's first malformed message and one with
# the count of the rest, not a line each, and goes on serving.
# Polls with deadlines; never sleeps a fixed time to wait for a state.
set -euo pipefail
work=$(mktemp -d)
pids=()
cleanup() {
  exec 7>&- 2>/dev/null || true
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "perms: FAIL: $*"; exit 1; }
passed=0
ok() { passed=$((passed + 1)); }

# mode_is PATH MODE: stat -c %a of PATH is MODE.
mode_is() {
  local got
  got=$(stat -c %a "$1") || fail "$1 is missing"
  [ "$got" = "$2" ] || fail "$1 has mode $got, not $2"
}

free_port() { /usr/bin/python3 "$TOP_SRCDIR/tests/multi/free_port.py"; } # below the kernel's own ports: see there

# owner_only DIR UMASK: every directory under DIR (itself included) is 0700
# and everything else 0600; and the files a running database has are there.
owner_only() {
  local db=$1 loose
  loose=$(find "$db" \( \( -type d ! -perm 700 \) -o \( ! -type d ! -perm 600 \) \) -printf '%m %p\n')
  [ -z "$loose" ] || fail "not owner-only under umask $2: $loose"
  mode_is "$db" 700
  mode_is "$db/catalog.db" 600
  for f in "$db/catalog.db-wal" "$db/catalog.db-shm"; do
    [ ! -e "$f" ] || mode_is "$f" 600
  done
  mode_is "$db/workers" 700
  for n in 0 1; do
    mode_is "$db/workers/w$n.log" 600
    mode_is "$db/workers/w$n" 700
    mode_is "$db/workers/w$n/LOCK" 600
    [ -S "$db/workers/w$n.ipc" ] || fail "no ipc socket $db/workers/w$n.ipc"
    mode_is "$db/workers/w$n.ipc" 600
  done
  # outputs reach their files in the background (SET synchronous = normal)
  local deadline=$((SECONDS + 30))
  until has_chunk_files "$db/workers"; do
    [ $SECONDS -lt $deadline ] || fail "no chunk files under $db/workers within 30 s"
    sleep 0.05
  done
}

has_chunk_files() { [ -n "$(find "$1" -name '*.chk')" ]; }

# with_shell UMASK [DBPATH]: run a shell with 2 local workers under UMASK,
# store a tensor, and check the database while the shell holds it open
# (the sockets and the WAL exist only then).  Without DBPATH the database
# is transient, under $work/tmp.UMASK.
with_shell() {
  local um=$1 db=${2:-} tmp=$work/tmp.$1
  mkdir -p "$tmp"
  # The shell truncates out only once it has opened the fifo: a previous
  # call's "1" left there would pass the wait below before this shell ran.
  rm -f "$work/in" "$work/out" "$work/err"
  mkfifo "$work/in"
  (umask "$um"; exec env TMPDIR="$tmp" "$TRADB" --local-workers 2 ${db:+"$db"} \
    < "$work/in" > "$work/out" 2> "$work/err") &
  local shell=$!
  pids+=("$shell")
  exec 7> "$work/in"
  echo "CREATE TENSOR A[64, 64] CHUNK [32, 32]; FILL A ONES; PRINT A[0:1, 0:1];" >&7
  local deadline=$((SECONDS + 60))
  until grep -q '^1$' "$work/out" 2>/dev/null; do
    kill -0 "$shell" 2>/dev/null || fail "shell (umask $um) ended: $(cat "$work/err")"
    [ $SECONDS -lt $deadline ] || fail "shell (umask $um) did not answer within 60 s"
    sleep 0.05
  done
  if [ -z "$db" ]; then
    db=$(find "$tmp" -mindepth 1 -maxdepth 1 -name 'tradb-*' -type d)
    [ -n "$db" ] || fail "no transient database under $tmp"
  fi
  owner_only "$db" "$um"
  exec 7>&-
  set +e; wait "$shell"; local rc=$?; set -e
  [ $rc -eq 0 ] || fail "shell (umask $um) failed: $(cat "$work/err")"
}

# New databases, named and transient, whatever the umask.
with_shell 000 "$work/db000"
ok
with_shell 022 "$work/db022"
ok
with_shell 000
[ -z "$(ls "$work/tmp.000")" ] || fail "transient database left behind"
ok

# A database an older tradb left open to others is tightened when opened;
# a directory of the user's that holds no catalog keeps its mode.
chmod 755 "$work/db022"
"$TRADB" "$work/db022" -c 'SHOW TENSORS;' > /dev/null || fail "reopening failed"
mode_is "$work/db022" 700
mkdir -m 755 "$work/mine"
(umask 000; "$TRADB" --local-workers 1 "$work/mine" -c 'CREATE TENSOR B[2];') || fail "database in an existing directory"
mode_is "$work/mine" 755
mode_is "$work/mine/catalog.db" 600
mode_is "$work/mine/workers" 700
ok

# A cluster.key its group may read: the worker and the shell refuse it.
"$TRADB" --gen-keys "$work/keys" > /dev/null || fail "--gen-keys failed"
mode_is "$work/keys/cluster.key" 600
chmod 640 "$work/keys/cluster.key"
want="cluster key $work/keys/cluster.key is readable by its group (mode 0640): chmod 600 it"
set +e
timeout 30 "$TRADB" --worker --listen "tcp://127.0.0.1:$(free_port)" --data "$work/kw" --keys "$work/keys" \
  2> "$work/kw.err"
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "a worker with a group-readable key ran (status $rc)"
grep -qF "$want" "$work/kw.err" || fail "worker's message: $(cat "$work/kw.err")"
set +e
"$TRADB" --keys "$work/keys" -c 'SHOW TENSORS;' > /dev/null 2> "$work/ks.err"
rc=$?
set -e
[ $rc -ne 0 ] || fail "a shell with a group-readable key ran"
grep -qF "$want" "$work/ks.err" || fail "shell's message: $(cat "$work/ks.err")"
ok

# Garbage on a worker's port, as ZeroMQ messages (a raw TCP stream that is
# not ZMTP never gets past libzmq): 200 malformed ones from one peer give
# one line, then one with the count once the interval has passed (1 s
# here; a minute by default).
port=$(free_port)
TRADB_TEST_DROP_LOG_S=1 "$TRADB" --worker --listen "tcp://127.0.0.1:$port" --data "$work/gw" \
  --threads 1 2> "$work/gw.log" &
gw=$!
pids+=("$gw")
deadline=$((SECONDS + 20))
until grep -q "listening" "$work/gw.log" 2>/dev/null; do
  kill -0 "$gw" 2>/dev/null || fail "worker did not start: $(cat "$work/gw.log")"
  [ $SECONDS -lt $deadline ] || fail "worker not listening within 20 s"
  sleep 0.05
done
# A DEALER speaking ZMTP 3.0 (NULL mechanism) that sends N one-frame
# messages "garbage", then holds the connection until it is killed.
cat > "$work/garbage.py" <<'EOF'
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
def exact(k):
    b = b""
    while len(b) < k:
        c = s.recv(k - len(b))
        if not c:
            sys.exit("connection closed during the handshake")
        b += c
    return b
s.sendall(b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\0") + bytes(32))
exact(64)  # the worker's greeting
ready = b"\x05READY" + b"\x0bSocket-Type" + (6).to_bytes(4, "big") + b"DEALER"
s.sendall(bytes([4, len(ready)]) + ready)
flags = exact(1)[0]  # the worker's READY
exact(int.from_bytes(exact(8), "big") if flags & 2 else exact(1)[0])
s.sendall(b"\x00\x07garbage" * n)
s.recv(1)
EOF
/usr/bin/python3 "$work/garbage.py" "$port" 200 2> "$work/garbage.err" &
gp=$!
pids+=("$gp")
# dropped: how many malformed messages the log accounts for
dropped() {
  awk '/dropped malformed message from peer/ { n++ }
       match($0, /dropped [0-9]+ more malformed/) { split(substr($0, RSTART), w, " "); n += w[2] }
       END { print n + 0 }' "$work/gw.log"
}
deadline=$((SECONDS + 30))
until [ "$(dropped)" -ge 200 ]; do
  kill -0 "$gp" 2>/dev/null || fail "garbage sender failed: $(cat "$work/garbage.err")"
  [ $SECONDS -lt $deadline ] || fail "the log accounts for $(dropped) of 200 dropped messages," \
    "in $(grep -c malformed "$work/gw.log") lines"
  sleep 0.05
done
lines=$(grep -c "malformed" "$work/gw.log")
[ "$(dropped)" -eq 200 ] && [ "$lines" -le 3 ] || fail "$lines log lines for 200 malformed messages"
grep -q "header of 7 bytes" "$work/gw.log" || fail "the reason is not logged"
kill "$gp"
out=$("$TRADB" --workers "tcp://127.0.0.1:$port" -c 'CREATE TENSOR g[2]; FILL g ONES; PRINT g;') \
  || fail "worker stopped serving after garbage"
[ "$out" = $'g[0:2] (f32)\n1  1' ] || fail "wrong result after garbage: '$out'"
kill -TERM "$gw"
set +e; wait "$gw"; rc=$?; set -e
[ $rc -eq 0 ] || fail "worker exited with status $rc after garbage"
ok

echo "perms: $passed passed, 0 failed"
