#!/usr/bin/env bash
# The tools fail on bad input with one line naming the culprit and a non-zero exit.
# Usage: cli_errors.sh PATH/TO/rqat
set -u
rqat=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_expect.sh"

mkdir -p "$tmp/m"
echo '{"model_type": "qwen3", "hidden_size": 32}' >"$tmp/m/config.json"
expect_error "field 'vocab_size' is missing" "$rqat" info --model "$tmp/m"
echo '{"model_type": "qwen3", ' >"$tmp/m/config.json"
expect_error "invalid JSON" "$rqat" info --model "$tmp/m"
cat >"$tmp/cfg.json" <<'JSON'
{"model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 50}
JSON
"$rqat" init-model --config "$tmp/cfg.json" --out "$tmp/good" --seed 1 >/dev/null || { echo "FAIL: init-model"; exit 1; }
head -c 100 "$tmp/good/model.safetensors" >"$tmp/cut.safetensors" && cp "$tmp/good/config.json" "$tmp/m/config.json"
mv "$tmp/cut.safetensors" "$tmp/m/model.safetensors"
expect_error "model.safetensors" "$rqat" info --model "$tmp/m"
expect_error "--device" "$rqat" logits --model "$tmp/good" --input "$tmp/cfg.json" --out "$tmp/o" --device tpu
expect_error "cfg.json" "$rqat" logits --model "$tmp/good" --input "$tmp/cfg.json" --out "$tmp/o" --device cpu
ptq="$(dirname "$rqat")/ptq"
expect_error "--calib" "$ptq" --model "$tmp/good" --out "$tmp/q" --method gptq
expect_error "--bits = 5" "$ptq" --model "$tmp/good" --out "$tmp/q" --method rtn --bits 5
expect_error "--method" "$ptq" --model "$tmp/good" --out "$tmp/q" --method smoothquant
[ ! -e "$tmp/q" ] || { echo "FAIL: ptq wrote $tmp/q before refusing"; failures=$((failures + 1)); }

# eval-math grade: re-grades saved completions; a line without gold is named.
evalmath="$(dirname "$rqat")/eval-math"
printf '%s\n' '{"completion": "so \\boxed{\\frac{1}{2}}", "gold": "0.5"}' '{"completion": "x = 3"}' >"$tmp/bad.jsonl"
expect_error "line 2" "$evalmath" grade "$tmp/bad.jsonl" --out "$tmp/graded.jsonl"
printf '%s\n' '{"completion": "so \\boxed{\\frac{1}{2}}", "gold": "0.5"}' '{"completion": "42", "gold": "41"}' >"$tmp/ok.jsonl"
if "$evalmath" grade "$tmp/ok.jsonl" --out "$tmp/graded.jsonl" >"$tmp/summary.txt" &&
   grep -q '"correct":true' "$tmp/graded.jsonl" && grep -q '"correct":false' "$tmp/graded.jsonl"; then
  echo "ok: eval-math grade"
else
  echo "FAIL: eval-math grade: $(cat "$tmp/summary.txt")"
  failures=$((failures + 1))
fi

# eval-math: a missing benchmark file and a bad protocol are named before any model is loaded.
expect_error "missing.jsonl" "$evalmath" --model "$tmp/good" --out "$tmp/e" --data "$tmp/missing.jsonl"
expect_error "--protocol" "$evalmath" --model "$tmp/good" --out "$tmp/e" --data "$tmp/ok.jsonl" --protocol beam

# rqat traces: a missing samples file is named; a line without the user turn names FILE:LINE and it.
expect_error "missing-samples.jsonl: file not found" "$rqat" traces "$tmp/missing-samples.jsonl" --out "$tmp/traces.jsonl"
printf '%s\n' '{"id": "1", "completion": "x", "gold": "1", "correct": true}' >"$tmp/nouser.jsonl"
expect_error "nouser.jsonl:1: field 'user'" "$rqat" traces "$tmp/nouser.jsonl" --out "$tmp/traces.jsonl"
[ ! -e "$tmp/traces.jsonl" ] || { echo "FAIL: rqat traces wrote $tmp/traces.jsonl before refusing"; failures=$((failures + 1)); }

# qat-sft / qat-kd: flags and inputs are checked before any training; nothing is written.
qatsft="$(dirname "$rqat")/qat-sft"
qatkd="$(dirname "$rqat")/qat-kd"
printf 'one document.\n\nanother one.\n' >"$tmp/train.txt"
expect_error "--bits is required" "$qatsft" --model "$tmp/good" --out "$tmp/t" --data "$tmp/train.txt"
expect_error "--schedule" "$qatsft" --model "$tmp/good" --out "$tmp/t" --data "$tmp/train.txt" --bits 4 --schedule step
expect_error "--scale-mode" "$qatsft" --model "$tmp/good" --out "$tmp/t" --data "$tmp/train.txt" --bits 4 --scale-mode lsqq
expect_error "--layout" "$qatsft" --model "$tmp/good" --out "$tmp/t" --data "$tmp/train.txt" --bits 4 --layout zigzag
expect_error "missing-train.txt" "$qatsft" --model "$tmp/good" --out "$tmp/t" --data "$tmp/missing-train.txt" --bits 4
expect_error "--teacher is required" "$qatkd" --model "$tmp/good" --out "$tmp/t" --data "$tmp/train.txt" --bits 4
expect_error "--divergence" "$qatkd" --model "$tmp/good" --out "$tmp/t" --data "$tmp/train.txt" --bits 4 --divergence l2
[ ! -e "$tmp/t" ] || { echo "FAIL: qat-sft wrote $tmp/t before refusing"; failures=$((failures + 1)); }

# rqat run: errors in an experiment file name FILE:LINE:COLUMN; nothing runs.
cat >"$tmp/exp.yaml" <<'YAML'
name: bad
stages:
  ptq:
    tool: ptq
    args: {model: "${model_dir}", bits: 3}
YAML
expect_error "exp.yaml:5:19: stages.ptq.args.model: unknown variable 'model_dir'" "$rqat" run "$tmp/exp.yaml" --dry-run
expect_error "--set stages.ptq.args.bits: stages.ptq.args.bits: unknown variable 'b'" "$rqat" run "$tmp/exp.yaml" --set model_dir=m --set 'stages.ptq.args.bits=${b}'
expect_error "exp.yaml:3:3: stage ptq: ptq has no flag --bitz" "$rqat" run "$tmp/exp.yaml" --set model_dir=m --set stages.ptq.args.bitz=3 --dry-run
expect_error "does not exist (an input of stage ptq)" "$rqat" run "$tmp/exp.yaml" --set model_dir="$tmp/nomodel" --out "$tmp/run"
expect_error "no-such.yaml: no such experiment file" "$rqat" run "$tmp/no-such.yaml"
[ ! -e "$tmp/run" ] || { echo "FAIL: rqat run created $tmp/run before refusing"; failures=$((failures + 1)); }

echo "$failures failed"
[ $failures -eq 0 ]
