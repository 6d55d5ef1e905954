#!/usr/bin/env bash
# Builds tradb from a clean or configured tree and runs every test
# (`make check`): Criterion unit tests, fuzz-corpus replays, golden shell
# tests and numeric tests; with the CUDA backend where nvcc is installed.
# Prints one closing line
#   check: N passed, M failed, K skipped
# and exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ ! -x configure ]; then autoreconf -fi || exit 1; fi
if [ ! -f Makefile ]; then
  # Where there is nvcc the CUDA backend must build (and its tests run, or
  # skip without a GPU): --with-cuda fails instead of quietly leaving it out.
  cuda=
  if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=--with-cuda; fi
  ./configure $cuda || exit 1
fi
make -j"$(nproc)" || exit 1
./tradb --version | sed 1d # the kernels compiled in, and the GPU found
make -j"$(nproc)" check
status=$?
pass=0 fail=0 skip=0
if [ -f test-suite.log ]; then
  pass=$(sed -n 's/^# PASS: *//p' test-suite.log | head -1)
  skip=$(sed -n 's/^# SKIP: *//p' test-suite.log | head -1)
  f1=$(sed -n 's/^# FAIL: *//p' test-suite.log | head -1)
  f2=$(sed -n 's/^# ERROR: *//p' test-suite.log | head -1)
  fail=$(( ${f1:-0} + ${f2:-0} ))
fi
if [ "$status" -ne 0 ] && [ "${fail:-0}" -eq 0 ]; then fail=1; fi
# A failing test's own log, last: where a CI run shows only the end of
# what was printed, the reason is there.
for trs in $(grep -l -E '^:test-result: (FAIL|ERROR)' $(find . -name '*.trs') 2>/dev/null); do
  echo "==== ${trs%.trs}.log (last 40 lines)"
  tail -n 40 "${trs%.trs}.log"
done
echo "check: ${pass:-0} passed, ${fail} failed, ${skip:-0} skipped"
exit "$status"
