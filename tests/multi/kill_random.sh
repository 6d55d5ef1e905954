#!/usr/bin/env bash
# Random kills against stored data: a worker (SIGKILL; TCP ones restarted,
# local ones started again by the next shell) or the shell killed at a random
# moment of a script of updates, and every tensor then what a replay of
# the statements that committed gives (tests/multi/kill_random.py).
# Skipped without python3-numpy.
TEST=kill_random
source "$TOP_SRCDIR/tests/multi/lib.sh"
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "$TEST: python3-numpy not installed, skipped"
  exit 77
fi
# the workers it starts have their data under $work: gone with it at exit
trap 'pkill -9 -f -- "--data $work/" 2>/dev/null || true; cleanup' EXIT
/usr/bin/python3 "$TOP_SRCDIR/tests/multi/kill_random.py" "$TRADB" "$work/tcp" 2 3 > "$work/out" 2>&1 \
  || { cat "$work/out"; fail "stored values differ from the replay (TCP workers)"; }
ok
/usr/bin/python3 "$TOP_SRCDIR/tests/multi/kill_random.py" "$TRADB" "$work/local" 2 3 local > "$work/out" 2>&1 \
  || { cat "$work/out"; fail "stored values differ from the replay (local workers)"; }
ok
finish
