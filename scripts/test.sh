#!/usr/bin/env bash
# The whole test suite on a fresh machine: walctl and its test extras in .venv, then pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/wal -k crash).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# --no-compile: pip does not compile every module of every package it installs (pyspark, moto,
# botocore...): a fresh venv's install takes 48-54 s of CPU instead of 58-72 s (wall 56-77 s
# against 72-86 s, on a shared machine); the tests compile the modules they import, once
# (bytecode is kept, below: ~3.5 s of CPU for walctl's, boto3's, moto's and pyspark's).
.venv/bin/python -m pip install --quiet --no-compile --disable-pip-version-check -e '.[test]'
# groff renders the man pages in the man-page tests (they skip, saying so, without it).
if ! command -v groff >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -qq && apt-get install -y -qq groff-base; } >/dev/null 2>&1 \
    || echo "walctl: warning: could not install groff-base; man page rendering tests will skip" >&2
fi
# Java runs Spark for the compaction tests (compact exits 4 without it).
if [ -z "${JAVA_HOME:-}" ] && ! command -v java >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; } >/dev/null 2>&1 \
    || echo "walctl: warning: could not install openjdk-17-jre-headless; compaction tests will fail" >&2
fi
# Bytecode is kept: with PYTHONDONTWRITEBYTECODE set (this machine sets it), every walctl process a
# test starts, and every worker's collection, compiles the same modules again (~40 % of a short
# run's CPU). The files go to __pycache__, which git ignores.
unset PYTHONDONTWRITEBYTECODE
# Two workers (pytest-xdist): most tests wait on subprocesses, devices and Spark, so two
# share 2 cores well; each worker has its own moto server and Spark session. WALCTL_TEST_WORKERS=0
# runs in one process (pytest -s output, pdb).
exec .venv/bin/python -m pytest -n "${WALCTL_TEST_WORKERS:-2}" "$@"
