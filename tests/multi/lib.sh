# Helpers shared by the multi-process tests (sourced, not run).
#   TEST=name; source "$TOP_SRCDIR/tests/multi/lib.sh"
# gives: $work (scratch directory, removed at exit with every process
# started through start_worker or track), fail, ok, free_port,
# start_worker N [args] (sets ep[N] and wpid[N]), stop_worker N,
# wait_until DEADLINE_S DESCRIPTION COMMAND... (polls, never a fixed sleep),
# wait_status DEADLINE_S DESCRIPTION PID (a child's end and its status),
# and finish (prints the summary); a path added to mounts is unmounted
# at exit.
set -euo pipefail
work=$(mktemp -d)
pids=()
mounts=()
passed=0
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  # a lazy unmount where a process still has the mount open (a local
  # worker of a killed shell, exiting): left mounted, it outlived the test
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "$TEST: FAIL: $*"
  for f in "$work"/w*.log "$work"/*/workers/w*.log; do
    [ -f "$f" ] && { echo "== $f"; tail -8 "$f"; }
  done
  exit 1
}
ok() { passed=$((passed + 1)); }
finish() { echo "$TEST: $passed passed, 0 failed"; }
track() { pids+=("$@"); }

free_port() { /usr/bin/python3 "$TOP_SRCDIR/tests/multi/free_port.py"; } # below the kernel's own ports: see there

# count PATTERN FILE: lines of FILE matching PATTERN (0 if there is no FILE)
count() { local c; c=$(grep -c -- "$1" "$2" 2>/dev/null) || true; echo "${c:-0}"; }

# wait_until SECONDS WHAT CMD...: run CMD until it succeeds, failing with
# WHAT after SECONDS.  CMD is run again each time: give a function, not
# an argument with $(...) in it (that is expanded once, at the call).
wait_until() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || fail "$what (not within $limit s)"
    sleep 0.05
  done
}

# wait_status SECONDS WHAT PID: wait (polling) until process PID, a child
# of this script, has ended, failing with WHAT after SECONDS; its exit
# status in $status
wait_status() {
  local pid=$3
  ended_() { ! kill -0 "$pid" 2>/dev/null; }
  wait_until "$1" "$2" ended_
  set +e
  wait "$pid"
  status=$?
  set -e
}

# start_worker N [extra args]: worker N on a fresh loopback port (or the
# port of ep[N] if set), data in $work/wN; sets ep[N] and wpid[N].  A
# fresh port is free when free_port looks but may be taken before the
# worker binds it (tests run side by side): then another is tried.
declare -a ep wpid
start_worker() {
  local n=$1; shift
  local fresh=0 try
  if [ -z "${ep[$n]:-}" ]; then fresh=1; fi
  for try in 1 2 3 4 5; do
    if [ $fresh -eq 1 ]; then ep[$n]="tcp://127.0.0.1:$(free_port)"; fi
    local lines; lines=$(count "listening" "$work/w$n.log")
    local busy; busy=$(count "Address already in use" "$work/w$n.log")
    # descriptors 3-9 closed: a test's fifo writer must not stay open in it
    "$TRADB" --worker --listen "${ep[$n]}" --data "$work/w$n" "$@" 2>> "$work/w$n.log" \
      3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
    wpid[$n]=$!
    track "${wpid[$n]}"
    local deadline=$((SECONDS + 20))
    until [ "$(count "listening" "$work/w$n.log")" -gt "$lines" ]; do
      if ! kill -0 "${wpid[$n]}" 2>/dev/null; then
        if [ $fresh -eq 1 ] && [ "$(count "Address already in use" "$work/w$n.log")" -gt "$busy" ]; then
          continue 2
        fi
        fail "worker $n did not start"
      fi
      [ $SECONDS -lt $deadline ] || fail "worker $n not listening within 20 s"
      sleep 0.05
    done
    return 0
  done
  fail "worker $n: no free port in 5 tries"
}

# stop_worker N [SIGNAL]: kill worker N (default SIGKILL) and reap it.
stop_worker() {
  kill "-${2:-9}" "${wpid[$1]}" 2>/dev/null || true
  wait "${wpid[$1]}" 2>/dev/null || true
}

# chunk files under a directory (every database's)
nchk() { find "$@" -name '*.chk' 2>/dev/null | wc -l; }

# hold_work_table: a work table of this test's own (util.h: a count of
# works started, then 127 slots of pids), given in TRADB_TEST_WORK_TABLE
# to every tradb process started after it, with slot 0 held by a
# stand-in process ($holder): they see the machine working (a worker's
# warm heap waits) until the test kills it.
hold_work_table() {
  table=/tradb-test-work-$$
  sleep 600 &
  holder=$!
  track "$holder"
  /usr/bin/python3 -c "import struct; open('/dev/shm$table', 'wb').write(struct.pack('<Ii', 1, $holder) + bytes(4 * 126))"
  trap 'rm -f "/dev/shm$table"; cleanup' EXIT
  export TRADB_TEST_WORK_TABLE=$table
}
