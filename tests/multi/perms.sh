#!/usr/bin/env bash
# Data safety on disk: under umask 000 and 022 a database, named or
# transient, with its local workers (their logs, chunk stores and ipc
# sockets) is its owner's alone: directories 0700, everything else 0600.
# A database left 0755 by an older tradb is tightened when opened; a
# directory of the user's without a catalog keeps its mode.  A worker and
# a shell refuse a cluster.key that its group may read.
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

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

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
  [ -n "$(find "$db/workers" -name '*.chk')" ] || fail "no chunk files under $db/workers"
}

# with_shell UMASK [DBPATH]: run a shell with 2 local workers under UMASK,
# store a tensor, and check the database while the shell holds it open
# (the sockets and the WAL exist only then).  Without DBPATH the database
# is transient, under $work/tmp.UMASK.
with_shell() {
  local um=$1 db=${2:-} tmp=$work/tmp.$1
  mkdir -p "$tmp"
  rm -f "$work/in"
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

echo "perms: $passed passed, 0 failed"
