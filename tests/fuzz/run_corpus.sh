#!/bin/bash
# tests/fuzz/run_corpus.sh - run by `make check`: replays the kept fuzz
# corpora (tests/fuzz/corpus/*) through the plain C replay drivers, under
# valgrind when it is installed.  Env: TOP_SRCDIR (source dir), TOP_BUILDDIR
# (build dir); both default to the current directory.
set -u

src=${TOP_SRCDIR:-.}
build=${TOP_BUILDDIR:-.}

runner=()
if command -v valgrind >/dev/null 2>&1; then
  runner=(valgrind --error-exitcode=99 -q --leak-check=full)
fi

status=0

# replay NAME: replay_NAME over tests/fuzz/corpus/NAME (skipped if absent).
replay() {
  local name=$1
  local corpus=$src/tests/fuzz/corpus/$name
  local prog=$build/tests/fuzz/replay_$name
  if [ ! -d "$corpus" ]; then
    echo "run_corpus: no corpus for $name, skipped"
    return 0
  fi
  if [ ! -x "$prog" ]; then
    echo "run_corpus: $prog not built" >&2
    status=1
    return 1
  fi
  echo "run_corpus: $name"
  if ! "${runner[@]}" "$prog" "$corpus"; then
    echo "run_corpus: replay of $name failed" >&2
    status=1
  fi
}

replay parse
replay array
replay net
replay task
replay memo
exit $status
