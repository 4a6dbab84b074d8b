#!/usr/bin/env bash
# The example programs as a user meets them (ctest examples.cli and examples.lstm_run):
#   cli       BIN_DIR LAUNCH --help of ember-resnet, ember-lstm and ember-launch: every option with a
#                            value shows "(default: ...)" unless its default is empty, no "{false}";
#                            a --checkpoint whose folder is missing is created at start (before the
#                            data is read), one under a plain file is refused at start.
#   lstm_run  BIN_DIR        a tiny ember-lstm run on a UTF-8 corpus: log.csv, steps.csv (one row
#                            per logging interval), curves.png when gnuplot exists, a checkpoint,
#                            valid UTF-8 samples, then --resume continues from the saved step.
#   gpt_run   BIN_DIR        the same for a tiny ember-gpt (a few steps of a 1-layer model).
set -euo pipefail
what=$1 bin=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ember-examples.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

check_help() {
  local exe=$1 path=${2:-$bin/$1} help
  help=$("$path" --help) || fail "$exe --help exited non-zero"
  [[ $help != *"{false}"* && $help != *"{true}"* ]] ||
    fail "$exe --help shows {false} marks:"$'\n'"$help"
  [[ $help != *"=["* && ! $help =~ (TEXT|INT|FLOAT|UINT)= ]] ||
    fail "$exe --help shows TYPE=default:"$'\n'"$help"
  # Options that take a value and have a non-empty default show it.
  # (A long option name puts its description on the next line.)
  local line missing=0 i lines
  mapfile -t lines <<<"$help"
  for ((i = 0; i < ${#lines[@]}; ++i)); do
    line=${lines[i]}
    [[ $line =~ ^\ +-.*\ (TEXT|INT|FLOAT|UINT) ]] || continue
    [[ $line == *"(default: "* || ${lines[i + 1]:-} == *"(default: "* ]] && continue
    case $line in
      *--corpus* | *--data* | *--checkpoint* | *--algo-mode* | *--random-resolution*) ;;  # ""
      *) echo "$exe: no default shown: $line" >&2; missing=1 ;;
    esac
  done
  ((missing == 0)) || fail "$exe --help misses defaults"
  echo "$exe --help: ok"
}

case $what in
  cli)
    check_help ember-resnet
    check_help ember-lstm
    check_help ember-gpt
    check_help ember-launch "${3:?the ember-launch executable}"
    # The folder is made before the data is read: the run fails on the missing dataset, after.
    rc=0
    "$bin/ember-lstm" --task fashion --device cpu --data "$tmp/no-such-data" \
      --checkpoint "$tmp/new/sub/lstm.ckpt" >"$tmp/out" 2>&1 || rc=$?
    ((rc == 1)) || fail "ember-lstm with missing data: status $rc (want 1)"
    [[ -d $tmp/new/sub ]] || fail "ember-lstm did not create --checkpoint's folder at start"
    "$bin/ember-resnet" --device cpu --data "$tmp/no-such-data" \
      --checkpoint "$tmp/new2/resnet.ckpt" >"$tmp/out" 2>&1 || true
    [[ -d $tmp/new2 ]] || fail "ember-resnet did not create --checkpoint's folder at start"
    touch "$tmp/plain"
    rc=0
    "$bin/ember-resnet" --device cpu --checkpoint "$tmp/plain/resnet.ckpt" >"$tmp/out" 2>&1 || rc=$?
    ((rc == 1)) && grep -q "^error: .*--checkpoint" "$tmp/out" ||
      fail "ember-resnet: a --checkpoint under a plain file is not refused at start: $(cat "$tmp/out")"
    echo "checkpoint folders: ok"
    ;;
  lstm_run)
    for i in $(seq 40); do printf 'héllo wörld, 1 € für 𝄞 — naïve café. ' ; done >"$tmp/corpus.txt"
    common=(--device cpu --corpus "$tmp/corpus.txt" --hidden 16 --embed 8 --layers 1 --seq-len 16
            --batch-size 4 --log-interval 1 --eval-every 3 --sample-every 3 --out "$tmp/run"
            --checkpoint "$tmp/ck/lstm.ckpt")
    "$bin/ember-lstm" "${common[@]}" --steps 6 >"$tmp/run1.txt" 2>&1 ||
      fail "ember-lstm run: $(cat "$tmp/run1.txt")"
    python3 -c 'import sys; open(sys.argv[1], encoding="utf-8", errors="strict").read()' \
      "$tmp/run1.txt" || fail "ember-lstm printed invalid UTF-8"
    [[ $(grep -c . "$tmp/run/steps.csv") -eq 7 ]] || fail "steps.csv: want a header and 6 rows"
    [[ $(grep -c . "$tmp/run/log.csv") -eq 3 ]] || fail "log.csv: want a header and 2 rows"
    [[ -f $tmp/ck/lstm.ckpt ]] || fail "no checkpoint written"
    if command -v gnuplot >/dev/null; then
      [[ -s $tmp/run/curves.png ]] || fail "no curves.png"
    fi
    "$bin/ember-lstm" "${common[@]}" --steps 9 --resume >"$tmp/run2.txt" 2>&1 ||
      fail "ember-lstm --resume: $(cat "$tmp/run2.txt")"
    grep -q "resumed from .* at step 6" "$tmp/run2.txt" || fail "no resume: $(cat "$tmp/run2.txt")"
    [[ $(grep -c . "$tmp/run/steps.csv") -eq 10 ]] || fail "steps.csv after --resume: want 9 rows"
    echo "ember-lstm run, plot, checkpoint and resume: ok"
    ;;
  gpt_run)
    for i in $(seq 40); do printf 'héllo wörld, 1 € für 𝄞 — naïve café. ' ; done >"$tmp/corpus.txt"
    common=(--device cpu --corpus "$tmp/corpus.txt" --d-model 16 --heads 2 --layers 1 --seq-len 16
            --batch-size 4 --warmup 2 --log-interval 1 --eval-every 3 --sample-chars 40
            --out "$tmp/run" --checkpoint "$tmp/ck/gpt.ckpt")
    "$bin/ember-gpt" "${common[@]}" --steps 6 >"$tmp/run1.txt" 2>&1 ||
      fail "ember-gpt run: $(cat "$tmp/run1.txt")"
    python3 -c 'import sys; open(sys.argv[1], encoding="utf-8", errors="strict").read()' \
      "$tmp/run1.txt" || fail "ember-gpt printed invalid UTF-8"
    grep -q -- "--- sample ---" "$tmp/run1.txt" || fail "ember-gpt printed no sample"
    grep -q "tokens/s" "$tmp/run1.txt" || fail "ember-gpt printed no tokens/s"
    [[ $(grep -c . "$tmp/run/steps.csv") -eq 7 ]] || fail "steps.csv: want a header and 6 rows"
    [[ $(grep -c . "$tmp/run/log.csv") -eq 3 ]] || fail "log.csv: want a header and 2 rows"
    [[ -f $tmp/ck/gpt.ckpt ]] || fail "no checkpoint written"
    if command -v gnuplot >/dev/null; then
      [[ -s $tmp/run/curves.png ]] || fail "no curves.png"
    fi
    "$bin/ember-gpt" "${common[@]}" --steps 9 --resume >"$tmp/run2.txt" 2>&1 ||
      fail "ember-gpt --resume: $(cat "$tmp/run2.txt")"
    grep -q "resumed from .* at step 6" "$tmp/run2.txt" || fail "no resume: $(cat "$tmp/run2.txt")"
    [[ $(grep -c . "$tmp/run/steps.csv") -eq 10 ]] || fail "steps.csv after --resume: want 9 rows"
    echo "ember-gpt run, plot, checkpoint and resume: ok"
    ;;
  *) fail "unknown check $what" ;;
esac
