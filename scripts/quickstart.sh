#!/usr/bin/env bash
# Install walctl in .venv and run the main job on embedded defaults: a regular file as the
# WAL device and a local directory as the object store. Needs no root, no cloud.
# WALCTL_QUICKSTART_DIR: where to put the files (default: a new temporary directory).
# WALCTL_SKIP_INSTALL=1: use the walctl already on PATH (the test suite does this).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${WALCTL_SKIP_INSTALL:-0}" != 1 ]; then
  [ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
  export PATH="$PWD/.venv/bin:$PATH"
fi
if [ -n "${WALCTL_QUICKSTART_DIR:-}" ]; then
  work=$WALCTL_QUICKSTART_DIR
else  # a temporary directory (the 64 MiB WAL and the store), removed on the way out
  work=$(mktemp -d)
  trap 'rm -rf "$work"; echo "quickstart: removed its files in $work (WALCTL_QUICKSTART_DIR=DIR keeps them)" >&2' EXIT
fi
wal="$work/wal.img"
store="$work/store"
set -x
walctl init "$wal" --capacity 64MiB
walctl append "$wal" --stream 1 "hello" "world"
printf 'event %s\n' 1 2 3 | walctl append "$wal" --stream 2 --input -
walctl recover "$wal" --payload text
walctl recover "$wal" --stats --json
walctl upload "$wal" --store "$store"
walctl inspect-object 1 --store "$store" --deep
walctl ls --store "$store"
printf 'event %s\n' 4 5 | walctl append "$wal" --stream 2 --input - --store "$store"
walctl upload "$wal" --store "$store" --json
walctl gc --store "$store" --dry-run
set +x
if [ "${WALCTL_SKIP_INSTALL:-0}" != 1 ]; then
  echo "walctl is installed in $PWD/.venv: 'source .venv/bin/activate' puts it on PATH" \
       "(or 'pipx install .' installs it as a tool of its own)" >&2
fi
