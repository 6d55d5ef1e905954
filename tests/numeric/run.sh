#!/usr/bin/env bash
# Numeric tests against NumPy (tests/numeric/check.py, check_data.py,
# plans.py, exprs.py);
# skipped (exit 77) when Debian's python3-numpy is not installed.
set -euo pipefail
PY=/usr/bin/python3
if ! "$PY" -c 'import numpy' 2>/dev/null; then
  echo "numeric: python3-numpy not installed, skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" "$TOP_SRCDIR/tests/numeric/check.py" "$TRADB" "$work"
"$PY" "$TOP_SRCDIR/tests/numeric/check_data.py" "$TRADB" "$work"
# random statements on operands and outputs in random chunks
mkdir "$work/plans"
"$PY" "$TOP_SRCDIR/tests/numeric/plans.py" "$TRADB" "$work/plans"
# random expressions over random tensors, f32 and f64 mixed
mkdir "$work/exprs"
"$PY" "$TOP_SRCDIR/tests/numeric/exprs.py" "$TRADB" "$work/exprs"
# independent subnet training (scripts/ist.py): the partition, one round
# and one data-parallel step against NumPy
mkdir "$work/ist"
"$PY" "$TOP_SRCDIR/tests/numeric/ist_check.py" "$TRADB" "$work/ist" "$TOP_SRCDIR"
