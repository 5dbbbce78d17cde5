#!/usr/bin/env bash
# Every test file alone, each in a process of its own (issue 32: each test passes when run alone,
# whatever ran before it, and in any order):
#
#   scripts/alone.sh                      every test file of tests/
#   scripts/alone.sh FILE|DIR...          these files (a folder: its test files)
#   scripts/alone.sh --changed [REF]      the test files changed since REF (default main), committed or not
#   scripts/alone.sh --reverse ...        each file's tests in reverse order (pytest-reverse's --reverse)
#
# Each file runs as `python -m pytest -q -p no:cacheprovider -n 0 FILE` (no xdist, no cache: nothing
# carries over from an earlier run). One line per file (ok/FAIL, pytest's counts, seconds), then a
# summary; the exit status is 1 if any file failed. Each file's output is kept in ALONE_LOG_DIR
# (default /tmp/walctl-alone/<time>). Slow: the whole tests/ folder takes about as long as the suite
# on one worker, plus a second or so per file; on a shared machine run it under `nice -n 19`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

reverse=() paths=() changed="" order=""
while [ $# -gt 0 ]; do
  case "$1" in
    --reverse) reverse=(--reverse); order=" in reverse order"; shift ;;
    --changed)
      changed=main; shift
      if [ $# -gt 0 ] && [ "${1#-}" = "$1" ] && git rev-parse --verify -q "$1^{commit}" >/dev/null; then
        changed=$1; shift
      fi ;;
    -h|--help) usage ;;
    -*) echo "alone.sh: unknown option $1" >&2; usage ;;
    *) paths+=("$1"); shift ;;
  esac
done

if [ ${#reverse[@]} -gt 0 ] && ! "$PY" -c "import pytest_reverse" 2>/dev/null; then
  echo "alone.sh: --reverse needs pytest-reverse (in the test extra: pip install -e '.[test]')" >&2
  exit 2
fi

files=()
if [ -n "$changed" ]; then
  base=$(git merge-base "$changed" HEAD)
  while IFS= read -r f; do
    case "$(basename "$f")" in test_*.py) [ -f "$f" ] && files+=("$f") ;; esac
  done < <({ git diff --name-only "$base" -- tests; git ls-files --others --exclude-standard tests; } | sort -u)
  if [ ${#files[@]} -eq 0 ]; then
    echo "alone.sh: no test file changed since $changed"
    exit 0
  fi
else
  [ ${#paths[@]} -gt 0 ] || paths=(tests)
  for p in "${paths[@]}"; do
    if [ -d "$p" ]; then
      while IFS= read -r f; do files+=("$f"); done < <(find "$p" -name 'test_*.py' -type f | sort)
    elif [ -f "$p" ]; then
      files+=("$p")
    else
      echo "alone.sh: no such file or folder: $p" >&2
      exit 2
    fi
  done
fi

logs=${ALONE_LOG_DIR:-/tmp/walctl-alone/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$logs"
echo "alone.sh: ${#files[@]} test files, each alone$order; logs in $logs"
failed=() nfiles=0 passed=0 nfailed=0 errors=0 skipped=0 started=$SECONDS
for f in "${files[@]}"; do
  nfiles=$((nfiles + 1))
  log="$logs/$(echo "$f" | tr / _).log"
  t0=$SECONDS
  status=0
  "$PY" -m pytest -q -p no:cacheprovider -n 0 "${reverse[@]}" "$f" >"$log" 2>&1 || status=$?
  # pytest's last line: "3 failed, 40 passed, 1 skipped in 2.31s" (-q; counts in any order)
  counts=$(grep -E '^(=+ )?([0-9]+ [a-z]+|no tests ran)(, [0-9]+ [a-z]+)* in [0-9.]+s' "$log" | tail -1 \
           | sed -E 's/^=+ //; s/ in [0-9.]+s.*//' || true)
  for kind in passed failed error skipped; do
    n=$(echo "$counts" | grep -oE "[0-9]+ $kind" | grep -oE '^[0-9]+' || true)
    n=${n:-0}
    case $kind in
      passed) passed=$((passed + n)) ;;
      failed) nfailed=$((nfailed + n)) ;;
      error) errors=$((errors + n)) ;;
      skipped) skipped=$((skipped + n)) ;;
    esac
  done
  if [ "$status" -eq 0 ]; then
    printf 'ok    %-60s %s (%ds)\n' "$f" "${counts:-?}" $((SECONDS - t0))
  else
    failed+=("$f")
    printf 'FAIL  %-60s %s (%ds, exit %d; %s)\n' "$f" "${counts:-no summary}" $((SECONDS - t0)) "$status" "$log"
  fi
done
echo "alone.sh: $nfiles files in $((SECONDS - started)) s: $passed passed, $nfailed failed, $errors errors," \
     "$skipped skipped; ${#failed[@]} files failed"
for f in "${failed[@]}"; do echo "  failed: $f"; done
[ ${#failed[@]} -eq 0 ]
