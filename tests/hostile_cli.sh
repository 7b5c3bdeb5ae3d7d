#!/usr/bin/env bash
# Issue 18's reproducer classes through the real tools (docs/reliability.md): every hostile file
# ends in exit status 1 and one line naming the file and what is wrong, never a signal or a hang;
# the grader grades a 1 MB adversarial completion in bounded time as not correct.
# Usage: hostile_cli.sh BIN_DIR SOURCE_DIR   (BIN_DIR holds rqat and eval-math)
set -u
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=python3
source "$(dirname "${BASH_SOURCE[0]}")/cli_expect.sh"
expect_rc=1 expect_timeout=60  # every hostile file: exit status 1, never a signal or a hang

# A model directory to spoil one file at a time: the shipped tiny teacher (0.45 MB).
fresh_model() { rm -rf "$tmp/m" && cp -r "$src/experiments/tiny/teacher" "$tmp/m"; }
nested() { $py -c "import sys; d=int(sys.argv[1]); print(sys.argv[2] + '['*d + ']'*d + sys.argv[3])" "$@"; }

# 1. safetensors: a shape whose byte count wraps around 2^64 over an 8-byte data range.
fresh_model
$py - "$tmp/m/model.safetensors" <<'PY'
import json, struct, sys
header = json.dumps({"t": {"dtype": "I64", "shape": [2**61 + 1, 1], "data_offsets": [0, 8]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header + b"\0" * 8)
PY
expect_error "model.safetensors" "$bin/rqat" info --model "$tmp/m"
# 1. config.json: sizes whose products wrap.
fresh_model
$py - "$tmp/m/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["vocab_size"] = 2**62; json.dump(c, open(sys.argv[1], "w"))
PY
expect_error "config.json: field 'vocab_size' is 4611686018427387904, above rqat's limit" "$bin/rqat" info --model "$tmp/m"

# 2. JSON nested 10^5 levels: config.json and tokenizer.json.
fresh_model
nested 100000 '{"model_type": "qwen3", "x": ' '}' >"$tmp/m/config.json"
expect_error "config.json" "$bin/rqat" info --model "$tmp/m"
fresh_model
nested 100000 '{"model": ' '}' >"$tmp/m/tokenizer.json"
printf 'hello\n' >"$tmp/lines.txt"
expect_error "tokenizer.json" "$bin/rqat" tokenize --tokenizer "$tmp/m" "$tmp/lines.txt"

# 3. tokenizer.json: a normalizer sequence nested as deep as the JSON limit allows, and ids near 2^31.
fresh_model
$py - "$tmp/m/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
n = {"type": "Lowercase"}
for _ in range(250):
    n = {"type": "Sequence", "normalizers": [n]}
t["normalizer"] = n
json.dump(t, open(sys.argv[1], "w"))
PY
expect_error "nested deeper than 64" "$bin/rqat" tokenize --tokenizer "$tmp/m" "$tmp/lines.txt"
for id in 2147483000 500000000; do
  fresh_model
  $py - "$tmp/m/tokenizer.json" "$id" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["added_tokens"].append({"id": int(sys.argv[2]), "content": "<|huge|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True})
json.dump(t, open(sys.argv[1], "w"))
PY
  expect_error "has id $id, far beyond" "$bin/rqat" tokenize --tokenizer "$tmp/m" "$tmp/lines.txt"
done

# 4. A chat template of 10^5 nested constructs.
fresh_model
$py - "$tmp/m/tokenizer_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["chat_template"] = "{% if messages %}" * 100000 + "x" + "{% endif %}" * 100000
json.dump(c, open(sys.argv[1], "w"))
PY
expect_error "tokenizer_config.json: chat_template is not a recognized format" "$bin/rqat" generate --model "$tmp/m" --prompt hi --chat --max-new-tokens 1

# 5. YAML: nested aliases ("billion laughs") and a sweep of 10^30 points.
$py - "$tmp/laughs.yaml" <<'PY'
import sys
lines = ["name: laughs", "vars:", '  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
for i in range(1, 30):
    lines.append(f"  l{i}: &l{i} [" + ", ".join([f"*l{i-1}"] * 10) + "]")
lines += ["stages:", "  a:", "    tool: rqat", "    args: [info, --model, x]"]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
expect_error "--max-yaml-nodes" "$bin/rqat" run --dry-run "$tmp/laughs.yaml"
$py - "$tmp/sweep.yaml" <<'PY'
import sys
lines = ["name: sweep", "sweep:", "  grid:"]
lines += [f"    v{i}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" for i in range(30)]
lines += ["stages:", "  a:", "    tool: rqat", "    args: [info, --model, x]"]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
expect_error "max-sweep-points" "$bin/rqat" run --dry-run "$tmp/sweep.yaml"

# 6. The grader on a 1 MB completion of repeated markers: bounded time, graded not correct.
$py - "$tmp/huge.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for completion in ["\\boxed{" * 100000, "\\boxed{}" * 120000, "The answer is " * 70000,
                       "\\fbox{}" * 120000]:
        f.write(json.dumps({"completion": completion, "gold": "42"}) + "\n")
PY
start=$(date +%s%N)
if timeout -k 5 60 "$bin/eval-math" grade "$tmp/huge.jsonl" --out "$tmp/graded.jsonl" >/dev/null 2>&1 &&
   [ "$(grep -c '"correct":false' "$tmp/graded.jsonl")" -eq 4 ]; then
  echo "ok: 4 adversarial 1 MB completions graded not correct in $(( ($(date +%s%N) - start) / 1000000 )) ms"
else
  echo "FAIL: eval-math grade on 1 MB adversarial completions"
  failures=$((failures + 1))
fi

echo "$failures failure(s)"
[ $failures -eq 0 ]
