"""The tokenizer `rqat tiny-task` writes (experiments/tiny) against Hugging Face: `tokenizers` gives the same ids
as `rqat tokenize` on every problem, solution line and chat-rendered line, and decodes back to the text; the
token lengths rqat measured for whole chat documents match; transformers' AutoTokenizer loads the directory,
encodes identically, and its apply_chat_template renders what rqat renders and qat-sft trains on; a model made by
`rqat init-model --tokenizer` from experiments/tiny/teacher_config.json loads in transformers with it.
Needs RQAT_BIN=<build>/apps/rqat.
Run: RQAT_BIN=build/apps/rqat .venv/bin/python -m pytest -v tests/python/test_tiny_task_tokenizer.py
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not (os.path.isfile(RQAT_BIN) and os.access(RQAT_BIN, os.X_OK)):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)

from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TEACHER_CONFIG = REPO / "experiments" / "tiny" / "teacher_config.json"
TIMEOUT_S = 300


def run(*args):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    return result.stdout


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def prompt_of(problem):
    # What eval-math sends with --instruction "" and qat-sft --chat renders (tests/test_tiny_task.cpp checks
    # rqat's rendering against the same text).
    return f"<|im_start|>user\n{problem}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_task")
    run(RQAT_BIN, "tiny-task", "--out", out, "--seed", 7, "--train", 500, "--test", 60, "--levels", 3)
    return out


def test_rqat_tokenize_matches_tokenizers(task, tmp_path):
    hf = Tokenizer.from_file(str(task / "tokenizer" / "tokenizer.json"))
    rows = read_jsonl(task / "train.jsonl") + read_jsonl(task / "test.jsonl")
    documents = [prompt_of(r["problem"]) + r["solution"] + "<|im_end|>\n" for r in rows]
    # `rqat tokenize` reads one text per line: the lines of every chat document (problems and solution steps
    # among them, special tokens included).
    lines = [line for doc in documents for line in doc.split("\n")]
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n")
    rqat_ids = [[int(t) for t in out.split()] for out in run(RQAT_BIN, "tokenize", "--tokenizer",
                                                               task / "tokenizer", tmp_path / "lines.txt").splitlines()]
    assert len(rqat_ids) == len(lines)
    for line, ids in zip(lines, rqat_ids):
        assert hf.encode(line).ids == ids, line
        assert hf.decode(ids, skip_special_tokens=False) == line

    # Whole documents: newlines are pre-tokens of their own here, so a document's ids are its lines' rqat ids
    # joined by the id of "\n"; and digits are single tokens.
    newline = hf.encode("\n").ids
    assert len(newline) == 1
    at = 0
    for doc in documents:
        n = doc.count("\n") + 1
        joined = []
        for k, ids in enumerate(rqat_ids[at:at + n]):
            joined += (newline if k else []) + ids
        at += n
        encoded = hf.encode(doc)
        assert encoded.ids == joined, doc
        assert hf.decode(encoded.ids, skip_special_tokens=False) == doc
    for d in "0123456789":
        assert len(hf.encode(d).ids) == 1
    assert hf.encode("37").tokens == ["3", "7"]

    # The lengths rqat measured while writing the task (manifest) are HF's token counts of the same documents.
    metrics = json.loads((task / "manifest.json").read_text())["metrics"]
    train = read_jsonl(task / "train.jsonl")
    totals = [len(hf.encode(prompt_of(r["problem"]) + r["solution"] + "<|im_end|>\n").ids) for r in train]
    prompts = [len(hf.encode(prompt_of(r["problem"])).ids) for r in train]
    assert metrics["train_tokens"]["mean_total_tokens"] == pytest.approx(sum(totals) / len(totals), abs=1e-9)
    assert metrics["train_tokens"]["mean_prompt_tokens"] == pytest.approx(sum(prompts) / len(prompts), abs=1e-9)
    assert metrics["train_tokens"]["max_total_tokens"] == max(totals)
    assert metrics["vocab_size"] == hf.get_vocab_size()


def test_auto_tokenizer_and_chat_template(task):
    hf = Tokenizer.from_file(str(task / "tokenizer" / "tokenizer.json"))
    tok = AutoTokenizer.from_pretrained(str(task / "tokenizer"))
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 258
    assert tok.pad_token_id == 256
    assert tok.convert_tokens_to_ids("<|im_start|>") == 257
    for r in read_jsonl(task / "test.jsonl"):
        user = [{"role": "user", "content": r["problem"]}]
        prompt = tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        assert prompt == prompt_of(r["problem"])
        document = tok.apply_chat_template(user + [{"role": "assistant", "content": r["solution"]}], tokenize=False)
        assert document == prompt + r["solution"] + "<|im_end|>\n"
        assert tok(document, add_special_tokens=True)["input_ids"] == hf.encode(document).ids
        assert tok.decode(tok(document)["input_ids"]) == document


def test_init_model_with_tokenizer_loads_in_transformers(task, tmp_path):
    model_dir = tmp_path / "teacher0"
    run(RQAT_BIN, "init-model", "--config", TEACHER_CONFIG, "--tokenizer", task / "tokenizer", "--out", model_dir,
        "--seed", 1)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (model_dir / name).read_bytes() == (task / "tokenizer" / name).read_bytes()
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    assert model.config.eos_token_id == tok.eos_token_id
    assert model.config.vocab_size >= len(tok)
