#!/bin/sh
# The build's layering (scripts/layers.py reads the object files): no cycle
# of calls between files, no call from a lower folder into a higher one.
exec "${PYTHON3:-python3}" "$TOP_SRCDIR/scripts/layers.py" "$TOP_BUILDDIR"
