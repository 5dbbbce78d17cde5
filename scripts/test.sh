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
# A fresh clone's first run (no test module compiled yet: pip installs with --no-compile, above):
# every xdist worker collects the whole suite at once, so each compiled the same ~700 modules
# (the test files' assertion rewriting, hypothesis, typer, _pytest...) at the same time. One
# collection in one process first compiles them once; the workers then find the bytecode. A
# cold cache (PYTHONPYCACHEPREFIX=fresh dir, -k matching no test, 2 cores): 29.2 s of CPU and
# 20.1 s of wall for the workers' collections, against 12.6 + 8.6 s of CPU and 12.8 + 5.6 s
# of wall with this first. Skipped when the bytecode is there (a later run).
if [ "${WALCTL_TEST_WORKERS:-3}" != 0 ] && ! compgen -G "tests/__pycache__/conftest.*-pytest-*.pyc" >/dev/null; then
  .venv/bin/python -m pytest -q -p no:cacheprovider --collect-only -n 0 "$@" >/dev/null 2>&1 || true
fi
# The tests' temporary files (tmp_path: WAL files, stores, loop devices' backing files) on an ext4
# file system held in memory: a loop device on a sparse file in /dev/shm (the file is unlinked once
# mounted; "discard" gives a deleted file's memory back at once). Each init, append and upload
# writes with O_DIRECT and fsync: on disk they wait for it, here only the file system's own work
# remains (-n 0 on three cli/pipeline files: 51-62 s -> 40-44 s of wall, the same CPU); walctl
# runs the same code on the same kind of file system (init refuses tmpfs itself). Root only;
# WALCTL_TEST_RAMDISK=0, or a --basetemp of your own, keeps pytest's default. It takes one loop
# device for the run, detached when the run ends (umount of a loop mount detaches it).
basetemp=()
ramdisk=""
cleanup() {
  if [ -n "$ramdisk" ]; then
    umount "$ramdisk" 2>/dev/null || umount -l "$ramdisk" 2>/dev/null || true
    rmdir "$ramdisk" 2>/dev/null || true
  fi
}
trap cleanup EXIT
case " $* " in *" --basetemp"*) WALCTL_TEST_RAMDISK=0 ;; esac
# Its size: 8 GiB, or what /dev/shm has free if less (the largest test writes 512 MiB; files are
# removed as tests pass; memory is taken only for what the files hold at a time). Under 2 GiB free
# (a container's 64 MiB /dev/shm), the files stay on disk: a full /dev/shm would fail writes.
shm_free_kib=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')
if [ "${WALCTL_TEST_RAMDISK:-1}" != 0 ] && [ "$(id -u)" = 0 ] && command -v mkfs.ext4 >/dev/null 2>&1 \
    && [ -d /dev/shm ] && [ -w /dev/shm ] && [ "${shm_free_kib:-0}" -ge $((2 << 20)) ]; then
  size_kib=$(( shm_free_kib - (256 << 10) < (8 << 20) ? shm_free_kib - (256 << 10) : (8 << 20) ))
  image=$(mktemp /dev/shm/walctl-tests-XXXXXX.img)
  ramdisk=$(mktemp -d "${TMPDIR:-/tmp}/walctl-tests-XXXXXX")
  if truncate -s "${size_kib}K" "$image" \
      && mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "$image" \
      && mount -o loop,discard "$image" "$ramdisk" >/dev/null 2>&1; then
    basetemp=(--basetemp "$ramdisk/pytest")
  else
    echo "walctl: warning: could not mount a file system in memory for the tests' files; they go to disk" >&2
    rmdir "$ramdisk" 2>/dev/null || true
    ramdisk=""
  fi
  rm -f "$image"
fi
# Three workers (pytest-xdist) on 2 cores: most tests wait on subprocesses, devices and Spark; a
# clean clone's run at 2 workers uses ~74 % of the cores. The same tree (4,963 tests, 2026-11-29,
# one after the other on an idle machine): pytest 567 s at 3 workers (87 % of the cores) against
# 608 s at 2. Each worker has its own moto
# server; the tests using a Spark session all go to the first worker (tests/conftest.py), which
# starts it once, and the slow others are spread over every worker's first tests.
# WALCTL_TEST_WORKERS=0 runs in one process (pytest -s output, pdb).
.venv/bin/python -m pytest -n "${WALCTL_TEST_WORKERS:-3}" "${basetemp[@]}" "$@"
