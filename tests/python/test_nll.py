"""`rqat nll` against transformers: a tiny random Llama with the real Qwen2.5 tokenizer, scored by rqat
and by transformers' own loss (model(input_ids, labels=...)) on the same documents and windows.
Covers plain text, a JSONL text field and chat prompt/response pairs (loss on the response only).
Needs RQAT_BIN=<path to rqat> and ../shared/data/tokenizers/qwen2.5 (skipped when either is absent).
Run: RQAT_BIN=build/apps/rqat .venv/bin/python -m pytest -v -s tests/python/test_nll.py
"""

import dataclasses
import inspect
import json
import os
import pathlib
import shutil
import subprocess

import pytest
import torch

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not (os.path.isfile(RQAT_BIN) and os.access(RQAT_BIN, os.X_OK)):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)

SHARED = pathlib.Path(os.environ.get("RQAT_SHARED_DATA") or pathlib.Path(__file__).resolve().parents[3] / "shared" / "data")
QWEN_TOKENIZER = SHARED / "tokenizers" / "qwen2.5"
if not (QWEN_TOKENIZER / "vocab.json").is_file():
    pytest.skip(f"SKIPPED: {QWEN_TOKENIZER} is absent", allow_module_level=True)

from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402

TOL = 1e-4
SUBPROCESS_TIMEOUT_S = 300
CHAT_END_OF_TURN = "<|im_end|>\n"  # what ChatML writes after an assistant message

TEXTS = [
    "Once upon a time there was a little robot named Bolt. Bolt liked to count the stars every night, "
    "and every night he lost count at one hundred and twelve.",
    "x",
    "The sum of the first n odd numbers is n squared: 1 + 3 + 5 = 9, and 1 + 3 + 5 + 7 = 16.",
    "Short one.",
]
CHAT = [
    {"q": "What is 7 times 8?", "a": "<think>\n7 * 8 = 56\n</think>\n\nThe answer is 56."},
    {"q": "Name a prime.", "a": "2 is the smallest prime."},
]


def run_rqat(*args):
    cmd = [RQAT_BIN, *map(str, args)]
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"{' '.join(cmd)} exited {e.returncode}\n--- stdout ---\n{e.stdout}\n--- stderr ---\n{e.stderr}")


def rope_kwargs(theta):
    # transformers 5 keeps rope settings in `rope_parameters`; 4.x used rope_theta.
    fields = (
        {f.name for f in dataclasses.fields(LlamaConfig)}
        if dataclasses.is_dataclass(LlamaConfig)
        else set(inspect.signature(LlamaConfig.__init__).parameters)
    )
    if "rope_parameters" in fields:
        return {"rope_parameters": {"rope_type": "default", "rope_theta": theta}}
    return {"rope_theta": theta}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("nll") / "tiny_llama"
    tok = AutoTokenizer.from_pretrained(str(QWEN_TOKENIZER))
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        initializer_range=0.1,  # logits far from uniform, so a wrong token shows in the loss
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        **rope_kwargs(10000.0),
    )
    torch.manual_seed(123)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(str(out))
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(QWEN_TOKENIZER / name, out / name)
    return out


@pytest.fixture(scope="module")
def hf(model_dir):
    model = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(str(model_dir))


def reference(model, documents, seq_len):
    """documents: list of (ids, labels) with -100 for unscored tokens. Windows start every seq_len - 1
    tokens (they share one token), as `rqat nll` documents; transformers' loss is the mean over the
    window's scored labels, so the sum is loss * count."""
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, labels in documents:
            for start in range(0, max(len(ids) - 1, 0), seq_len - 1):
                w_ids = torch.tensor([ids[start : start + seq_len]])
                w_labels = torch.tensor([labels[start : start + seq_len]])
                n = int((w_labels[0, 1:] != -100).sum())
                if n == 0:
                    continue
                loss = model(input_ids=w_ids, labels=w_labels, use_cache=False).loss
                total += loss.item() * n
                count += n
    return total / count, count


def rqat_nll(tmp_path, model_dir, data, *flags):
    out = tmp_path / "nll.json"
    result = run_rqat("nll", "--model", model_dir, "--data", data, "--json", out, "--dtype", "f32", "--device", "cpu", *flags)
    assert "perplexity" in result.stdout, result.stdout
    return json.loads(out.read_text())


def check(name, got, ref_mean, ref_count):
    print(f"{name}: rqat mean NLL {got['mean_nll']:.6f} over {got['tokens']} tokens, transformers {ref_mean:.6f} over {ref_count}")
    assert got["tokens"] == ref_count
    assert abs(got["mean_nll"] - ref_mean) <= TOL
    assert abs(got["perplexity"] - torch.tensor(ref_mean).exp().item()) <= TOL * got["perplexity"]


@pytest.mark.parametrize("seq_len", [16])
def test_plain_text_paragraphs(tmp_path, model_dir, hf, seq_len):
    model, tok = hf
    data = tmp_path / "docs.txt"
    data.write_text("\n\n".join(TEXTS) + "\n")
    docs = []
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        docs.append((ids, list(ids)))
    ref_mean, ref_count = reference(model, docs, seq_len)
    check(f"text seq_len {seq_len}", rqat_nll(tmp_path, model_dir, data, "--seq-len", seq_len, "--batch-size", 3), ref_mean, ref_count)


def test_jsonl_field(tmp_path, model_dir, hf):
    model, tok = hf
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(TEXTS)))
    docs = [(tok(t)["input_ids"], tok(t)["input_ids"]) for t in TEXTS]
    ref_mean, ref_count = reference(model, docs, 32)
    check("jsonl body", rqat_nll(tmp_path, model_dir, data, "--field", "body", "--seq-len", 32), ref_mean, ref_count)


def test_chat_response_only(tmp_path, model_dir, hf):
    model, tok = hf
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"q": r["q"], "a": r["a"]}) + "\n" for r in CHAT))
    docs = []
    for r in CHAT:
        prompt = tok.apply_chat_template([{"role": "user", "content": r["q"]}], add_generation_prompt=True, tokenize=False)
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        response_ids = tok(r["a"] + CHAT_END_OF_TURN, add_special_tokens=False)["input_ids"]
        docs.append((prompt_ids + response_ids, [-100] * len(prompt_ids) + response_ids))
    ref_mean, ref_count = reference(model, docs, 128)
    got = rqat_nll(tmp_path, model_dir, data, "--chat", "--prompt-field", "q", "--response-field", "a", "--seq-len", 128)
    assert got["chat_template"] == "chatml"
    check("chat", got, ref_mean, ref_count)


def test_errors_are_one_line(tmp_path, model_dir):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    cmd = [RQAT_BIN, "nll", "--model", str(model_dir), "--data", str(data), "--seq-len", "64"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode != 0
    err = result.stderr.strip()
    assert "\n" not in err and f"{data}:2:" in err and "'text'" in err, err
