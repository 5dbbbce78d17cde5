#!/usr/bin/env bash
# Mutation testing (issue 32): mutmut on one module, with the tests that cover it.
#
#   scripts/mutation.sh walctl/format/object.py        one module (its test selection: below)
#   scripts/mutation.sh --changed [REF]                 the walctl/*.py files changed since REF (main)
#   scripts/mutation.sh --list                          the modules with a test selection
#
# Not part of the suite: it is slow (minutes a module). Each module runs in its own scratch copy
# (MUTATION_DIR, default /tmp/walctl-mutation/<module>), so a re-run only tests the mutants of
# functions that changed (mutmut's cache), and the worktree never gets a mutants/ folder.
# One worker, nice'd (the machine is shared); MUTATION_WORKERS=N to change. Results: the score line
# this prints, `scripts/mutation.sh --results MODULE` for the survivors, and docs/MUTATION.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-$ROOT/.venv/bin/python}
WORKERS=${MUTATION_WORKERS:-1}
BASE=${MUTATION_DIR:-/tmp/walctl-mutation}
# Property tests run at most this many examples per mutant (tests/conftest.py): a mutant re-runs the
# same tests hundreds of times, and a broken function fails within a few examples.
export WALCTL_HYPOTHESIS_MAX_EXAMPLES=${MUTATION_MAX_EXAMPLES:-30}

# Module -> the tests that kill its mutants, chosen to run in seconds (mutmut runs, for each mutant,
# only the tests of this selection that call the mutated function). Keep each selection fast: never
# a Spark, device-loop or chaos file.
selection() {
  case "$1" in
    walctl/format/object.py)   echo "tests/format/test_format_object.py tests/format/test_entry_rows.py tests/format/test_batch_shapes.py tests/format/test_object_messages.py" ;;
    walctl/format/record.py)   echo "tests/format/test_format_record.py tests/format/test_record_messages.py tests/format/test_format_batch.py" ;;
    walctl/format/batch.py)    echo "tests/format/test_format_batch.py tests/format/test_format_record.py tests/format/test_batch_shapes.py tests/format/test_batch_messages.py" ;;
    walctl/format/bulk.py)     echo "tests/format/test_native.py tests/format/test_bulk_units.py" ;;
    walctl/format/crc.py)      echo "tests/format/test_native.py tests/format/test_format_header.py tests/format/test_crc_loading.py" ;;
    walctl/format/footer.py)   echo "tests/format/test_format_object.py tests/format/test_object_structs.py tests/format/test_object_messages.py" ;;
    walctl/format/index.py)    echo "tests/format/test_format_object.py tests/format/test_object_structs.py tests/format/test_object_messages.py" ;;
    walctl/format/index_entry.py) echo "tests/format/test_format_object.py tests/format/test_object_structs.py tests/format/test_object_messages.py" ;;
    walctl/format/datablock.py) echo "tests/format/test_format_object.py tests/format/test_object_structs.py tests/format/test_object_messages.py" ;;
    walctl/format/header.py)   echo "tests/format/test_format_header.py tests/format/test_header_messages.py" ;;
    walctl/format/checkpoint.py) echo "tests/format/test_format_checkpoint.py tests/format/test_checkpoint_messages.py" ;;
    walctl/format/composite.py) echo "tests/format/test_composite.py" ;;
    walctl/format/checks.py)   echo "tests/format/test_object_structs.py tests/format/test_object_messages.py tests/format/test_batch_messages.py tests/format/test_record_messages.py tests/format/test_format_object.py" ;;
    walctl/format/framepack.py) echo "tests/format/test_framepack.py tests/format/test_framepack_units.py" ;;
    walctl/format/seal.py)     echo "tests/format/test_format_seal.py tests/format/test_seal_messages.py" ;;
    walctl/format/*.py)        echo "tests/format" ;;
    walctl/store/manifest.py)  echo "tests/store/test_manifest.py tests/store/test_manifest_race.py tests/store/test_manifest_edges.py tests/store/test_manifest_units.py" ;;
    walctl/store/manifest_schema.py) echo "tests/store/test_manifest_schema.py tests/store/test_manifest.py tests/store/test_manifest_edges.py" ;;
    walctl/wal/decoder.py)     echo "tests/wal/test_decoder.py tests/wal/test_decoder_units.py" ;;
    walctl/wal/findings.py)    echo "tests/wal/test_gaps_findings_units.py" ;;
    walctl/wal/framing.py)     echo "tests/wal/test_framing_units.py tests/wal/test_framing_units2.py tests/cli/test_append_framing.py" ;;
    walctl/wal/gaps.py)        echo "tests/wal/test_gaps_findings_units.py" ;;
    walctl/wal/headers.py)     echo "tests/wal/test_headers_units.py tests/wal/test_headers_units2.py" ;;
    walctl/wal/reader.py)      echo "tests/wal/test_reader_units.py tests/wal/test_reader_units2.py tests/wal/test_decoder.py" ;;
    walctl/wal/ringread.py)    echo "tests/wal/test_mut_ringread.py" ;;
    walctl/wal/native_scan.py) echo "tests/wal/test_mut_native_scan.py" ;;
    walctl/wal/automq_scan.py) echo "tests/wal/test_mut_automq_scan.py" ;;
    walctl/wal/verify.py)      echo "tests/wal/test_mut_verify.py" ;;
    walctl/wal/crash_repair.py) echo "tests/wal/test_crash_repair_units.py tests/wal/test_wal_engine.py -k repair" ;;
    walctl/wal/layout.py)      echo "tests/wal/test_mut_layout.py" ;;
    walctl/wal/verdict.py)     echo "tests/wal/test_mut_verdict.py" ;;
    walctl/wal/init.py)        echo "tests/wal/test_mut_init.py" ;;
    walctl/wal/trim.py)        echo "tests/wal/test_mut_trim.py tests/wal/test_trim_mark.py" ;;
    walctl/wal/image.py)       echo "tests/wal/test_mut_image.py" ;;
    walctl/wal/readsession.py) echo "tests/wal/test_mut_readsession.py" ;;
    walctl/pipeline/readwal.py) echo "tests/pipeline/test_mut_readwal.py" ;;
    walctl/pipeline/rowcopy.py) echo "tests/pipeline/test_rowcopy.py tests/pipeline/test_mut_rowcopy.py" ;;
    walctl/wal/pacing.py)      echo "tests/wal/test_mut_pacing.py" ;;
    walctl/wal/writer_room.py) echo "tests/wal/test_mut_writer.py" ;;
    walctl/wal/writer.py)      echo "tests/wal/test_mut_writer.py" ;;
    walctl/wal/writer_blocks.py) echo "tests/wal/test_mut_writer.py tests/wal/test_mut_writer2.py tests/wal/test_mut_writer3.py tests/wal/test_writer_frames.py tests/wal/test_writer_reaper_between_blocks.py tests/wal/test_mut_writer4.py" ;;
    walctl/wal/writer_window.py) echo "tests/wal/test_mut_writer.py tests/wal/test_mut_writer2.py tests/wal/test_mut_writer_window.py tests/wal/test_mut_writer4.py tests/wal/test_mut_writer_ackfail.py" ;;
    walctl/wal/feed.py)        echo "tests/wal/test_mut_feed.py tests/wal/test_feed_file_buffer.py tests/wal/test_feed_onecopy.py" ;;
    walctl/wal/handoff.py)     echo "tests/wal/test_mut_handoff.py" ;;
    walctl/wal/lifecycle.py)   echo "tests/wal/test_mut_lifecycle.py tests/wal/test_trim_mark.py" ;;
    walctl/pipeline/upload/spool.py) echo "tests/pipeline/test_mut_upload_spool.py tests/store/test_upload_spool.py" ;;
    walctl/pipeline/upload/plan.py)  echo "tests/pipeline/test_mut_upload_plan.py" ;;
    walctl/pipeline/upload/commit.py) echo "tests/pipeline/test_mut_upload_commit.py" ;;
    walctl/pipeline/upload/judge.py)  echo "tests/pipeline/test_mut_upload_judge.py" ;;
    walctl/pipeline/upload/blocks.py) echo "tests/pipeline/test_mut_upload_blocks.py" ;;
    walctl/pipeline/upload/handoff.py) echo "tests/pipeline/test_mut_upload_handoff.py" ;;
    walctl/pipeline/upload/salvage.py) echo "tests/pipeline/test_mut_upload_salvage.py" ;;
    walctl/pipeline/upload/background.py) echo "tests/pipeline/test_mut_upload_background.py" ;;
    walctl/pipeline/upload/state.py) echo "tests/pipeline/test_mut_upload_state.py" ;;
    walctl/pipeline/upload/scanindex.py) echo "tests/pipeline/test_mut_upload_scanindex.py" ;;
    walctl/pipeline/upload/run.py) echo "tests/pipeline/test_mut_upload_run.py" ;;
    walctl/pipeline/upload/walread.py) echo "tests/pipeline/test_mut_upload_walread.py" ;;
    walctl/pipeline/readresult.py) echo "tests/pipeline/test_mut_readresult.py" ;;
    walctl/pipeline/check.py)  echo "tests/pipeline/test_mut_check.py" ;;
    walctl/pipeline/append.py) echo "tests/pipeline/test_mut_append.py tests/pipeline/test_mut_append2.py tests/pipeline/test_mut_append3.py" ;;
    walctl/pipeline/read.py)   echo "tests/pipeline/test_mut_read.py tests/pipeline/test_mut_read2.py tests/pipeline/test_mut_read3.py" ;;
    walctl/pipeline/readobject.py) echo "tests/pipeline/test_mut_read.py" ;;
    walctl/compaction/planner.py)  echo "tests/compaction/test_mut_plan.py tests/spark/test_spark_plan.py" ;;
    walctl/compaction/plan.py)     echo "tests/compaction/test_mut_plan.py tests/spark/test_spark_plan.py" ;;
    walctl/compaction/coverage.py) echo "tests/compaction/test_mut_plan.py tests/spark/test_spark_plan.py" ;;
    *) return 1 ;;
  esac
}

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }

slug() { local s=${1#walctl/}; s=${s%.py}; echo "${s//\//.}"; }

# The scratch copy for MODULE: walctl/, tests/, tools/ and a pyproject.toml whose [tool.mutmut]
# table is the repository's plus this module's only_mutate and test selection.
prepare() {
  local module=$1 dir=$2; shift 2
  mkdir -p "$dir"
  # the sources are copied afresh each run (mutmut's cache is in mutants/ and keyed by function hashes)
  rm -rf "$dir/walctl" "$dir/tests" "$dir/tools"
  cp -r "$ROOT/walctl" "$ROOT/tests" "$ROOT/tools" "$dir/"
  # mutmut refreshes only the .py files of an existing mutants/ copy: the compiled extensions (and
  # their C sources) are copied by hand, else a re-run tests the new Python against the old C (a
  # test that needs a new C function is then skipped, and every mutant it kills "survives").
  if [ -d "$dir/mutants/walctl" ]; then
    (cd "$dir/walctl" && find . \( -name '*.so' -o -name '*.c' \) -exec cp --parents {} "$dir/mutants/walctl/" \;)
  fi
  # mutmut runs, for a mutant, the tests its stats say call the function; a test added since they
  # were collected is in none of them. When the selection's files changed, the stats are collected
  # again (a minute). Mutants of unchanged functions keep their result: re-run survivors by name
  # (`cd DIR && mutmut run NAME...`) to try new tests on them.
  local sum
  sum=$(cd "$ROOT" && cat "$@" 2>/dev/null | sha1sum | cut -c1-40)
  if [ -f "$dir/selection.sha1" ] && [ "$(cat "$dir/selection.sha1")" != "$sum" ]; then
    rm -f "$dir/mutants/mutmut-stats.json"
  fi
  echo "$sum" >"$dir/selection.sha1"
  "$PY" - "$ROOT/pyproject.toml" "$dir/pyproject.toml" "$module" "$@" <<'EOF'
import json, re, sys, tomllib
src, dst, module, *tests = sys.argv[1:]
text = open(src, encoding="utf-8").read()
conf = dict(tomllib.loads(text).get("tool", {}).get("mutmut", {}))
# drop the repository's [tool.mutmut] table; it is written back below with this module's keys
text = re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[|\Z)", "", text)
conf["only_mutate"] = [module]
conf["pytest_add_cli_args_test_selection"] = tests
lines = ["[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in conf.items()]
open(dst, "w", encoding="utf-8").write(text.rstrip() + "\n\n" + "\n".join(lines) + "\n")
EOF
}

run_module() {
  local module=$1 sel dir
  if ! sel=$(selection "$module"); then
    echo "mutation: no test selection for $module; add one to scripts/mutation.sh's selection()" >&2
    return 2
  fi
  dir=$BASE/$(slug "$module")
  # shellcheck disable=SC2086  # the selection is words (paths and -k expressions)
  prepare "$module" "$dir" $sel
  echo "mutation: $module ($sel) in $dir" >&2
  (cd "$dir" && nice -n 10 "$PY" -m mutmut run --max-children "$WORKERS" >"$dir/run.log" 2>&1) || {
    echo "mutation: mutmut failed for $module; see $dir/run.log" >&2; tail -20 "$dir/run.log" >&2; return 1; }
  score "$module" "$dir"
}

# One line: module, killed/total, score; then the survivors' names (`mutmut show NAME` in the
# module's scratch folder prints a mutant's diff).
score() {
  local module=$1 dir=$2
  (cd "$dir" && "$PY" -m mutmut results --all true >"$dir/results.txt" 2>/dev/null) || true
  "$PY" - "$module" "$dir/results.txt" <<'EOF'
import collections, sys
module, path = sys.argv[1:]
status = collections.Counter()
survivors = []
for line in open(path, encoding="utf-8"):
    name, sep, st = line.strip().rpartition(": ")
    if not sep:
        continue
    status[st] += 1
    if st == "survived":
        survivors.append(name)
killed = status["killed"] + status["timeout"] + status["caught by type check"]
total = killed + status["survived"] + status["no tests"]
pct = 100.0 * killed / total if total else 0.0
print(f"{module}: {killed}/{total} killed ({pct:.1f} %), {status['survived']} survived, "
      f"{status['no tests']} without a test, {status['timeout']} timeouts")
for s in survivors:
    print("  survived:", s)
EOF
}

case "${1:-}" in
  ""|-h|--help) usage ;;
  --list) sed -n '/^selection()/,/^}/p' "$0" | grep -o 'walctl/[^)]*\.py' ;;
  --results) score "$2" "$BASE/$(slug "$2")" ;;
  --changed)
    ref=${2:-main}
    status=0
    for f in $(git diff --name-only "$ref" -- 'walctl/*.py'); do
      [ -f "$f" ] || continue
      run_module "$f" || status=1
    done
    exit $status ;;
  *) for m in "$@"; do run_module "$m"; done ;;
esac
