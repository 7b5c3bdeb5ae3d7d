#!/usr/bin/env bash
# Every experiment file in experiments/ validates (`rqat run --dry-run`: keys, types, variables,
# stage references, and every flag against its tool's --help) and turns into SLURM scripts that
# bash can parse (`rqat sbatch`). Full-scale files name models that are not here: those paths are
# warnings in a dry run, never errors.
# Usage: experiment_files.sh PATH/TO/rqat EXPERIMENTS_DIR
set -u
rqat=$1
experiments=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0 files=0
while IFS= read -r -d '' file; do
  files=$((files + 1))
  name=$(basename "$file" .yaml)
  if ! out=$("$rqat" run "$file" --dry-run --run-dir "$tmp/run-$name" 2>&1); then
    echo "FAIL: rqat run --dry-run $file: $(printf '%s\n' "$out" | tail -1)"
    failures=$((failures + 1))
    continue
  fi
  stages=$(printf '%s\n' "$out" | grep -c '^\[ *[0-9]*/[0-9]*\]')
  if ! out=$("$rqat" sbatch "$file" --out "$tmp/slurm-$name" --run-dir "$tmp/run-$name" 2>&1); then
    echo "FAIL: rqat sbatch $file: $(printf '%s\n' "$out" | tail -1)"
    failures=$((failures + 1))
    continue
  fi
  for script in "$tmp/slurm-$name"/*.sbatch "$tmp/slurm-$name/submit.sh"; do
    bash -n "$script" || { echo "FAIL: bash -n $script"; failures=$((failures + 1)); }
  done
  echo "ok: $file ($stages stages, $(ls "$tmp/slurm-$name"/*.sbatch | wc -l) batch scripts)"
done < <(find "$experiments" -name '*.yaml' -print0 | sort -z)
[ "$files" -gt 0 ] || { echo "FAIL: no experiment files under $experiments"; exit 1; }
echo "$files files, $failures failed"
[ "$failures" -eq 0 ]
