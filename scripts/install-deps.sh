#!/usr/bin/env bash
# Installs what tradb needs to build, test and benchmark on Debian 12.
# Used by the README's set-up command and by .ci/run, so both stay in step.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential autoconf automake libtool pkg-config \
  libsqlite3-dev libzmq3-dev libopenblas-dev libxxhash-dev libreadline-dev \
  libcriterion-dev libglpk-dev \
  python3 python3-numpy python3-dask python3-distributed python3-torch python3-sklearn \
  openmpi-bin libopenmpi-dev libscalapack-openmpi-dev gnuplot-nox linux-perf \
  valgrind clang libclang-rt-14-dev procps >/dev/null
