"""llama2.c -> Hugging Face conversion checked against transformers and tokenizers: `rqat convert --llama2c`
on the real stories260K checkpoint and its tok512 tokenizer must load in transformers (AutoModelForCausalLM,
AutoTokenizer) with the logits rqat computes, the logits of llama2.c's run.c (a numpy transcription of its
forward pass, interleaved RoPE, on the raw .bin), the ids of rqat's tokenizer and of run.c's encoder on every
line of the TinyStories sample, and karpathy's documented greedy story. Variants of the tokenizer.json
pipeline (legacy Prepend/Replace normalizer, Metaspace schemes) are compared with the `tokenizers` library.
Needs RQAT_BIN=<path to rqat> and ../shared/data/tinyllama (else skipped).
Run: RQAT_BIN=build/apps/rqat .venv/bin/python -m pytest -v -s tests/python/test_llama2c_convert.py
"""

import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not (os.path.isfile(RQAT_BIN) and os.access(RQAT_BIN, os.X_OK)):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)

DATA = Path(os.environ.get("RQAT_SHARED_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")
DATA = DATA / "tinyllama"
CHECKPOINT, TOKENIZER_BIN, SAMPLE = DATA / "stories260K.bin", DATA / "tok512.bin", DATA / "tinystories_sample.txt"
if not all(p.is_file() for p in (CHECKPOINT, TOKENIZER_BIN, SAMPLE)):
    pytest.skip(f"{DATA} (stories260K.bin, tok512.bin, tinystories_sample.txt) is absent", allow_module_level=True)

from tokenizers import Tokenizer  # noqa: E402  (only worth importing when we run)
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

STORY = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high"
)
# Float32 round-off on logits of magnitude ~20 after 5 layers: rqat and transformers each sit ~2e-5 from the
# float64 run.c transcription (measured 1.7e-5 both), so 5e-5 leaves room for summation-order changes while
# a wrong weight layout (errors of order 1) cannot pass.
LOGITS_TOL = 5e-5  # rqat vs transformers
RUNC_TOL = 5e-5  # each float32 implementation vs the float64 run.c transcription
SUBPROCESS_TIMEOUT_S = 600


def run_rqat(*args, check=True):
    cmd = [RQAT_BIN, *map(str, args)]
    try:
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"{' '.join(cmd)} exited {e.returncode}\n--- stdout ---\n{e.stdout}\n--- stderr ---\n{e.stderr}")


def sample_lines():
    return SAMPLE.read_text(encoding="utf-8").split("\n")[:-1]  # the file ends with a newline


# ---------------------------------------------------------------- independent llama2.c references


def read_runc_weights(path):
    """The arrays of a llama2.c v0 file, as run.c's memory_map_weights lays them out."""
    raw = path.read_bytes()
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack_from("7i", raw, 0)
    shared = vocab > 0
    vocab = abs(vocab)
    hs = dim // heads
    kv = kv_heads * hs
    data = np.frombuffer(raw, dtype="<f4", offset=28)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        out = data[pos : pos + n].reshape(shape).astype(np.float64)
        pos += n
        return out

    w = {"dim": dim, "heads": heads, "kv_heads": kv_heads}
    w["embed"] = take(vocab, dim)
    w["att_norm"] = take(layers, dim)
    w["wq"], w["wk"], w["wv"], w["wo"] = take(layers, dim, dim), take(layers, kv, dim), take(layers, kv, dim), take(layers, dim, dim)
    w["ffn_norm"] = take(layers, dim)
    w["w1"], w["w2"], w["w3"] = take(layers, hidden, dim), take(layers, dim, hidden), take(layers, hidden, dim)
    w["final_norm"] = take(dim)
    take(seq_len * hs)  # RoPE tables
    w["cls"] = w["embed"] if shared else take(vocab, dim)
    assert pos == data.size
    return w


def runc_logits(w, tokens):
    """run.c's forward pass (float64) over a whole sequence: RoPE rotates the pairs (2i, 2i+1) of each head."""
    dim, heads, kv_heads = w["dim"], w["heads"], w["kv_heads"]
    hs = dim // heads
    T = len(tokens)

    def rmsnorm(x, g):
        return g * x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)

    freq = 1.0 / 10000.0 ** (np.arange(0, hs, 2) / hs)  # per pair within a head
    angle = np.arange(T)[:, None] * freq[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]

    def rope(x, n):  # x: (T, n * hs)
        x = x.reshape(T, n, hs // 2, 2)
        a, b = x[..., 0], x[..., 1]
        return np.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(T, n * hs)

    x = w["embed"][tokens]
    causal = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(w["att_norm"].shape[0]):
        xb = rmsnorm(x, w["att_norm"][l])
        q = rope(xb @ w["wq"][l].T, heads).reshape(T, heads, hs)
        k = rope(xb @ w["wk"][l].T, kv_heads).reshape(T, kv_heads, hs)
        v = (xb @ w["wv"][l].T).reshape(T, kv_heads, hs)
        rep = heads // kv_heads
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hs) + causal
        att = np.exp(scores - scores.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", att, v).reshape(T, dim) @ w["wo"][l].T
        xb = rmsnorm(x, w["ffn_norm"][l])
        h1, h3 = xb @ w["w1"][l].T, xb @ w["w3"][l].T
        x = x + (h1 / (1 + np.exp(-h1)) * h3) @ w["w2"][l].T
    return rmsnorm(x, w["final_norm"]) @ w["cls"].T


def read_runc_vocab(path):
    raw = path.read_bytes()
    pos, pieces, scores = 4, [], []
    while pos < len(raw):
        score, n = struct.unpack_from("fi", raw, pos)
        pieces.append(raw[pos + 8 : pos + 8 + n])
        scores.append(score)
        pos += 8 + n
    return pieces, scores


def runc_encode(pieces, scores, text):
    """run.c's encode() without BOS: dummy " ", characters (else byte tokens id = byte + 3), best-score merges."""
    lookup = {p: i for i, p in enumerate(pieces)}
    tokens = [lookup[b" "]] if text else []
    for ch in text:
        b = ch.encode("utf-8")
        tokens += [lookup[b]] if b in lookup else [c + 3 for c in b]
    while True:
        best = None
        for i in range(len(tokens) - 1):
            j = lookup.get(pieces[tokens[i]] + pieces[tokens[i + 1]])
            if j is not None and (best is None or scores[j] > best[0]):
                best = (scores[j], i, j)
        if best is None:
            return tokens
        _, i, j = best
        tokens[i : i + 2] = [j]


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("llama2c") / "stories260K"
    run_rqat("convert", "--llama2c", CHECKPOINT, "--tokenizer-bin", TOKENIZER_BIN, "--out", out)
    return out


@pytest.fixture(scope="module")
def hf_model(converted):
    model, info = AutoModelForCausalLM.from_pretrained(
        str(converted), dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


@pytest.fixture(scope="module")
def hf_tokenizer(converted):
    return AutoTokenizer.from_pretrained(str(converted))


def rqat_tokenize(tokenizer_dir, lines, tmp_path, add_special=False):
    path = tmp_path / "lines.txt"
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    args = ["tokenize", "--tokenizer", tokenizer_dir, path] + (["--add-special"] if add_special else [])
    out = run_rqat(*args).stdout.split("\n")[:-1]
    assert len(out) == len(lines)
    return [[int(t) for t in row.split()] for row in out]


# ---------------------------------------------------------------- tests


def test_config_and_files(converted):
    cfg = json.loads((converted / "config.json").read_text())
    expected = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 172,
        "num_hidden_layers": 5,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "vocab_size": 512,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    assert {k: cfg.get(k) for k in expected} == expected
    tensors = load_file(str(converted / "model.safetensors"))
    assert "lm_head.weight" not in tensors  # tied
    assert sum(t.numel() for t in tensors.values()) == 260032  # the .bin's weights without RoPE tables
    tok_cfg = json.loads((converted / "tokenizer_config.json").read_text())
    assert tok_cfg["tokenizer_class"] == "LlamaTokenizer" and tok_cfg["add_bos_token"] is True


def test_logits_match_rqat_and_runc(converted, hf_model, hf_tokenizer, tmp_path):
    T = 40
    rows = [hf_tokenizer(line)["input_ids"][:T] for line in sample_lines() if len(line) > 200][:3]
    assert len(rows) == 3 and all(len(r) == T and r[0] == 1 for r in rows)
    ids = torch.tensor(rows, dtype=torch.int64)
    mask = torch.ones_like(ids)
    inp, out = tmp_path / "input.safetensors", tmp_path / "logits.safetensors"
    save_file({"input_ids": ids, "attention_mask": mask}, str(inp), metadata={"format": "pt"})
    run_rqat("logits", "--model", converted, "--input", inp, "--out", out, "--dtype", "f32")
    ours = load_file(str(out))["logits"]
    with torch.no_grad():
        ref = hf_model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()
    assert ours.shape == ref.shape == (3, T, 512)
    assert ref.std().item() > 1.0  # trained logits, not a flat vacuous case
    diff = (ours - ref).abs().max().item()
    w = read_runc_weights(CHECKPOINT)
    runc = np.stack([runc_logits(w, row) for row in rows])
    diff_runc = np.abs(ref.double().numpy() - runc).max()
    diff_rqat_runc = np.abs(ours.double().numpy() - runc).max()
    print(
        f"\nstories260K logits (max |logit| {ref.abs().max().item():.1f}): max |rqat - transformers| = {diff:.2e}, "
        f"max |transformers - run.c| = {diff_runc:.2e}, max |rqat - run.c| = {diff_rqat_runc:.2e}"
    )
    assert diff <= LOGITS_TOL
    assert diff_runc <= RUNC_TOL and diff_rqat_runc <= RUNC_TOL


def test_tokenizers_agree_on_tinystories(converted, hf_tokenizer, tmp_path):
    lines = sample_lines()
    assert len(lines) == 25
    ours = rqat_tokenize(converted, lines, tmp_path)
    ours_bos = rqat_tokenize(converted, lines, tmp_path, add_special=True)
    raw = Tokenizer.from_file(str(converted / "tokenizer.json"))  # the file as written, without transformers
    pieces, scores = read_runc_vocab(TOKENIZER_BIN)
    for line, ids, ids_bos in zip(lines, ours, ours_bos):
        hf = hf_tokenizer(line, add_special_tokens=False)["input_ids"]
        assert ids == hf, line
        assert ids_bos == hf_tokenizer(line)["input_ids"] == [1] + ids, line
        assert raw.encode(line, add_special_tokens=False).ids == ids, line
        assert ids == runc_encode(pieces, scores, line), line
        assert hf_tokenizer.decode(ids) == line
        assert hf_tokenizer.decode(ids_bos, skip_special_tokens=True) == line
    assert sum(map(len, ours)) > 500  # not vacuously empty


def test_transformers_greedy_tells_the_story(hf_model, hf_tokenizer):
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([[1]]), max_new_tokens=90, do_sample=False, eos_token_id=2)
    text = hf_tokenizer.decode(out[0], skip_special_tokens=True)
    print(f"\ntransformers greedy from BOS: {text!r}")
    assert text.startswith(STORY)


# Texts where pipeline details show: spaces at the start, in runs and at the end, special tokens inside the
# text, characters outside the vocabulary (byte fallback), an empty line.
EDGE_LINES = [
    " Once upon a time",
    "  two spaces",
    "end space ",
    "a  b   c",
    "<s>Once<s> upon</s>",
    "Lily \u00e9t\u00e9 \u4e2d\u6587 \U0001f600!",
    "",
    "tab\there",
]


def variant(converted, tmp_path, name, normalizer, pre_tokenizer):
    tok = json.loads((converted / "tokenizer.json").read_text(encoding="utf-8"))
    tok["normalizer"], tok["pre_tokenizer"] = normalizer, pre_tokenizer
    out = tmp_path / name
    out.mkdir()
    (out / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    return out


@pytest.mark.parametrize(
    "name,normalizer,pre_tokenizer",
    [
        ("as_written", "keep", "keep"),
        (
            "legacy_prepend_replace",
            {
                "type": "Sequence",
                "normalizers": [
                    {"type": "Prepend", "prepend": "\u2581"},
                    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
                ],
            },
            None,
        ),
        ("metaspace_always_split", None, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}),
        ("metaspace_first_split", None, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}),
        ("metaspace_never", None, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": False}),
    ],
)
def test_pipeline_variants_match_tokenizers(converted, tmp_path, name, normalizer, pre_tokenizer):
    if normalizer == "keep":
        tok_dir = converted
    else:
        tok_dir = variant(converted, tmp_path, name, normalizer, pre_tokenizer)
    lines = sample_lines()[:6] + EDGE_LINES
    raw = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    ours = rqat_tokenize(tok_dir, lines, tmp_path)
    for line, ids in zip(lines, ours):
        assert ids == raw.encode(line, add_special_tokens=False).ids, (name, line)


def test_convert_errors(tmp_path):
    bad = tmp_path / "truncated.bin"
    bad.write_bytes(CHECKPOINT.read_bytes()[:-100])
    r = run_rqat("convert", "--llama2c", bad, "--out", tmp_path / "out", check=False)
    assert r.returncode != 0
    message = r.stderr.strip()
    assert "truncated.bin" in message and "truncated" in message and "\n" not in message, message
    assert not (tmp_path / "out").exists()

    r = run_rqat("convert", "--out", tmp_path / "out", check=False)
    assert r.returncode != 0 and "--llama2c" in r.stderr, r.stderr
    r = run_rqat("convert", "--llama2c", CHECKPOINT, "--model", tmp_path, "--out", tmp_path / "out", check=False)
    assert r.returncode != 0 and "excludes" in r.stderr, r.stderr
