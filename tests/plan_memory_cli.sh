#!/usr/bin/env bash
# `rqat plan-memory` and the memory plan of `rqat run --dry-run` (docs/distributed.md "Memory
# plan"): bad flags are one line naming the flag; a plan over the GPU's memory warns and exits 0;
# a dry run prints the plan and the warning for a training stage with GPUs, and nothing new for a
# stage without.
# Usage: plan_memory_cli.sh PATH/TO/rqat
set -u
rqat=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/cli_expect.sh"

expect_output() {  # expect_output NEEDLE TEXT
  if [[ "$2" != *"$1"* ]]; then fail "expected '$1' in: $2"; else echo "ok: has '$1'"; fi
}

# Qwen3-8B's shape (config.json only: the plan reads nothing else).
mkdir -p "$tmp/qwen3-8b"
cat >"$tmp/qwen3-8b/config.json" <<'JSON'
{"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
 "tie_word_embeddings": false}
JSON
plan=("$rqat" plan-memory --model "$tmp/qwen3-8b")

expect_error "--tool" "${plan[@]}" --tool dpo
expect_error "--shard" "${plan[@]}" --shard half
expect_error "--mode" "${plan[@]}" --tool grpo --mode lora
expect_error "--world-size" "${plan[@]}" --world-size 0
expect_error "--world-size" "${plan[@]}" --world-size many
expect_error "--dtype" "${plan[@]}" --dtype fp8
expect_error "--prompts-per-step" "${plan[@]}" --tool grpo --prompts-per-step 6 --world-size 4
expect_error "--batch-size" "${plan[@]}" --tool qat-kd --batch-size 6 --world-size 4
expect_error "--lora-target-modules" "${plan[@]}" --tool grpo --mode qlora --lora-target-modules x
expect_error "--model DIR or --config FILE" "$rqat" plan-memory --tool grpo
expect_error "no config.json" "$rqat" plan-memory --model "$tmp/nowhere"
expect_error "--bogus" "${plan[@]}" --bogus

# About 8.2e9 parameters; 16 bytes each unsharded: 122 GiB before activations, over 80 GiB.
if out=$("${plan[@]}" --tool qat-sft --gpu-memory 80 2>&1); then
  expect_output "8.19B parameters" "$out"
  expect_output "warning: qat-sft needs" "$out"
  expect_output "the GPU has 80.0 GiB" "$out"
else
  fail "plan-memory with --gpu-memory exited non-zero: $out"
fi
if out=$("${plan[@]}" --tool grpo --world-size 8 --shard parameters --json 2>/dev/null) &&
   python3 -c 'import json, sys; j = json.load(sys.stdin); assert j["parameters"]["total"] == 8190735360' <<<"$out"; then
  echo "ok: --json"
else
  fail "plan-memory --json: $out"
fi

# A dry run: the training stage with 8 GPUs of 80 GB gets its plan and the warning; the stage
# without GPUs gets nothing. The bin dir holds only rqat (the tools' flags are not checked).
mkdir -p "$tmp/bin"
ln -s "$(realpath "$rqat")" "$tmp/bin/rqat"
cat >"$tmp/exp.yaml" <<YAML
name: plan
stages:
  kd:
    tool: qat-kd
    args: {model: "$tmp/qwen3-8b", data: "$tmp/data.jsonl", batch-size: 16, micro-batch-size: 1,
           max-length: 4096, shard: none}
    resources: {gpus: 8, gpu_memory_gb: 80}
  kd-cpu:
    tool: qat-sft
    args: {model: "$tmp/qwen3-8b", data: "$tmp/data.jsonl"}
    resources: {gpus: 0}
YAML
if out=$("$rqat" run "$tmp/exp.yaml" --dry-run --run-dir "$tmp/run" --bin-dir "$tmp/bin" 2>&1); then
  expect_output "qat-kd memory per rank" "$out"
  expect_output "--shard none, 8 ranks" "$out"
  expect_output "warning: qat-kd needs" "$out"
  [ "$(grep -c 'memory per rank' <<<"$out")" -eq 1 ] || fail "a stage without GPUs got a plan: $out"
else
  fail "rqat run --dry-run: $out"
fi
# A bad resource value is named with its place in the file.
sed -i 's/gpu_memory_gb: 80/gpu_memory_gb: lots/' "$tmp/exp.yaml"
expect_error "gpu_memory_gb" "$rqat" run "$tmp/exp.yaml" --dry-run --run-dir "$tmp/run" --bin-dir "$tmp/bin"

[ "$failures" -eq 0 ] && echo "all ok" || echo "$failures failed"
[ "$failures" -eq 0 ]
