"""GGUF export for llama.cpp (`rqat convert --to gguf`, quant/gguf/export.h) against llama.cpp's own readers.

For tiny qwen2 (attention biases), qwen3 (q/k norms, tied embeddings) and llama (llama3 rope scaling, q/k rows
reordered) models of hidden size 256 made here, in every GGUF type:
  - exactness: every tensor dequantized by the gguf package (llama.cpp's Python reference) equals rqat's own
    dequantization (`rqat convert --model x.gguf`, its import) bit for bit, awkward blocks included (all zeros, one
    huge outlier, negative only, denormal fp16 scales);
  - llama.cpp (llama-cpp-python, built from source by the test setup) loads the file, and its logits on a prompt
    equal rqat's forward of the imported (dequantized) model: f32/f16/bf16 within 5e-3 of the largest logit (and the
    f16 file within 1e-2 of the original model's), the block types within 6e-2 (llama.cpp's CPU kernels round the
    activations to 8 bits for a quantized matrix; measured 2-4%), with the same arg-max at 90% of positions or more;
  - greedy generation: the trained tiny teacher (hidden 64: the 32-value block types) answers a problem with the
    same tokens in llama.cpp and in rqat, and a model whose output layer maps each token to a fixed successor
    generates the same 32 tokens in every K-quant;
  - llama.cpp tokenizes MATH-500's problems to rqat's ids with the Qwen2.5 vocabulary (../shared/data);
  - llama.cpp's own quantizer (llama-quantize --pure) turns rqat's f32 file into the very bytes of rqat's export in
    every block type;
  - a type the shapes cannot hold is refused before any work, in one line naming the tensor and the type.
Needs RQAT_BIN and the gguf package; the llama.cpp parts skip with a message without llama-cpp-python.
"""

import ctypes
import json
import os
import pathlib
import shutil

import numpy as np
import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not os.access(RQAT_BIN, os.X_OK):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)
gguf = pytest.importorskip("gguf", reason="the gguf package (pip) reads the files")
import safetensors.numpy as st  # noqa: E402

from gguf_models import (FAMILIES, PROMPT, ROOT, TEACHER, export, hf_name, llama_cpp, llama_cpp_logits,  # noqa: E402
                         make_model, rotate_half_rows, rqat_logits, run)

needs_llama_cpp = pytest.mark.skipif(llama_cpp is None, reason="llama-cpp-python is not installed")

SHARED = pathlib.Path(os.environ.get("RQAT_SHARED_DATA", ROOT.parent / "shared" / "data"))
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]
K_TYPES = ["q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]
# llama.cpp's logits against rqat's forward of the imported weights, relative to the largest logit: float noise
# for f32 (measured 1.4e-6); llama.cpp multiplies f16 and bf16 matrices with activations rounded to f16/bf16
# (measured ~1e-3 / ~1e-2) and quantized ones with activations rounded to 8 bits (measured 2.5-4.5%).
TOLERANCE = {"f32": 1e-4, "f16": 5e-3, "bf16": 3e-2}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return root, {family: make_model(root / family, config, seed)
                  for seed, (family, config) in enumerate(FAMILIES.items(), start=1)}


@pytest.fixture(scope="module")
def exported(models):
    """Every family in every type: the GGUF file and its import by rqat."""
    root, dirs = models
    out = {}
    for family, model in dirs.items():
        for gguf_type in TYPES:
            file = export(model, gguf_type, root / f"{family}-{gguf_type}.gguf")
            imported = root / f"{family}-{gguf_type}-imported"
            run(RQAT_BIN, "convert", "--model", file, "--out", imported)
            out[family, gguf_type] = (file, imported)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_every_type_dequantizes_bit_for_bit_as_llama_cpp_reads_it(exported, family):
    config = FAMILIES[family]
    for gguf_type in TYPES:
        file, imported = exported[family, gguf_type]
        reader = gguf.GGUFReader(str(file))
        fields = {k: reader.fields[k] for k in reader.fields}
        assert bytes(fields["general.architecture"].parts[-1]).decode() == family
        assert int(fields[f"{family}.block_count"].parts[-1][0]) == config["num_hidden_layers"]
        assert int(fields[f"{family}.attention.head_count_kv"].parts[-1][0]) == config["num_key_value_heads"]
        assert len(fields["tokenizer.ggml.tokens"].data) == config["vocab_size"]
        ours = st.load_file(imported / "model.safetensors")
        names = set()
        for tensor in reader.tensors:
            if tensor.name == "rope_freqs.weight":
                assert family == "llama"
                continue
            name = hf_name(tensor.name)
            names.add(name)
            mine = ours[name]
            theirs = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32).reshape(mine.shape)
            if family == "llama" and (".q_proj." in name or ".k_proj." in name):
                heads = config["num_attention_heads"] if ".q_proj." in name else config["num_key_value_heads"]
                theirs = rotate_half_rows(theirs, heads)
            expected_type = gguf_type if mine.ndim == 2 else "f32"
            assert tensor.tensor_type.name.lower() == expected_type, (tensor.name, tensor.tensor_type.name)
            assert np.array_equal(mine.view(np.uint32), theirs.view(np.uint32)), (gguf_type, tensor.name)
        assert names == set(ours), (gguf_type, set(ours) ^ names)
        assert ("model.layers.0.self_attn.q_proj.bias" in names) == (family == "qwen2")
        assert ("lm_head.weight" in names) == (not config["tie_word_embeddings"])


@needs_llama_cpp
@pytest.mark.parametrize("family", FAMILIES)
def test_llama_cpp_logits_equal_rqat_forward_of_the_same_weights(models, exported, family):
    root, dirs = models
    work = root / f"logits-{family}"
    work.mkdir(exist_ok=True)
    original = rqat_logits(dirs[family], PROMPT, work)
    for gguf_type in TYPES:
        file, imported = exported[family, gguf_type]
        theirs = llama_cpp_logits(file, PROMPT)
        mine = rqat_logits(imported, PROMPT, work)
        scale = np.abs(mine).max()
        error = np.abs(theirs - mine).max() / scale
        agree = (theirs.argmax(1) == mine.argmax(1)).mean()
        print(f"{family} {gguf_type}: max |llama.cpp - rqat| = {error:.2e} of the largest logit, arg-max agrees at "
              f"{agree:.0%} of positions")
        assert error < TOLERANCE.get(gguf_type, 8e-2), (gguf_type, error)
        # Random weights leave near ties that 8-bit activations can flip; float types agree everywhere.
        assert agree >= (1.0 if gguf_type in ("f32", "f16") else 0.8), (gguf_type, agree)
        if gguf_type == "f16":
            assert np.abs(theirs - original).max() / np.abs(original).max() < 1e-2


# llama.h's llama_ftype of a file of one block type (the K-quants as their "_S" names; --pure keeps every matrix
# in that type).
LLAMA_FTYPE = {"q8_0": 7, "q4_0": 2, "q4_1": 3, "q2_k": 10, "q3_k": 11, "q4_k": 14, "q5_k": 16, "q6_k": 18}


@needs_llama_cpp
@pytest.mark.parametrize("family", FAMILIES)
def test_rqat_quantizes_every_block_byte_for_byte_as_llama_quantize(models, exported, family):
    """llama.cpp's own quantizer (llama_model_quantize, what llama-quantize runs) on rqat's f32 export gives the very
    bytes of rqat's export in each type: the same reference quantization, block for block."""
    root, _ = models
    source, _ = exported[family, "f32"]
    for gguf_type, ftype in LLAMA_FTYPE.items():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.pure = True
        theirs_file = root / f"{family}-llama-quantize-{gguf_type}.gguf"
        assert llama_cpp.llama_model_quantize(str(source).encode(), str(theirs_file).encode(),
                                              ctypes.byref(params)) == 0
        theirs = {t.name: t for t in gguf.GGUFReader(str(theirs_file)).tensors}
        mine = {t.name: t for t in gguf.GGUFReader(str(exported[family, gguf_type][0])).tensors}
        assert set(theirs) == set(mine)
        for name, t in mine.items():
            assert t.tensor_type == theirs[name].tensor_type, (gguf_type, name)
            assert np.asarray(t.data).tobytes() == np.asarray(theirs[name].data).tobytes(), (gguf_type, name)


def greedy_llama_cpp(gguf_file, ids, n, stop_at_eog):
    llm = llama_cpp.Llama(model_path=str(gguf_file), n_ctx=256, n_threads=2, verbose=False)
    out = []
    for token in llm.generate(ids, temp=0.0, repeat_penalty=1.0):
        if len(out) == n or (stop_at_eog and llama_cpp.llama_vocab_is_eog(llm._model.vocab, token)):
            break
        out.append(token)
    return out, llm.detokenize(out).decode("utf-8", errors="replace")


def rqat_generate(model_dir, prompt, n, ignore_eos):
    args = [RQAT_BIN, "generate", "--model", model_dir, "--prompt", prompt, "--max-new-tokens", n,
            "--temperature", "0", "--device", "cpu"]
    return run(*args, *(["--ignore-eos"] if ignore_eos else [])).stdout


@needs_llama_cpp
def test_the_trained_teacher_answers_alike_in_llama_cpp(tmp_path):
    prompt = "<|im_start|>user\nLily has 15 books. She loses 4. She buys 9 more. How many books now?<|im_end|>\n" \
             "<|im_start|>assistant\n"
    for gguf_type in ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"]:
        file = export(TEACHER, gguf_type, tmp_path / f"teacher-{gguf_type}.gguf")
        imported = tmp_path / f"teacher-{gguf_type}"
        run(RQAT_BIN, "convert", "--model", file, "--out", imported, "--tokenizer", TEACHER)
        llm = llama_cpp.Llama(model_path=str(file), n_ctx=256, n_threads=2, verbose=False)
        prompt_ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        del llm
        ids, text = greedy_llama_cpp(file, prompt_ids, 32, stop_at_eog=True)
        mine = rqat_generate(imported, prompt, 32, ignore_eos=False)
        assert text.strip() and text.strip() in mine, (gguf_type, text, mine)
        assert "\\boxed{20}" in text, (gguf_type, text)


@needs_llama_cpp
@pytest.mark.parametrize("gguf_type", K_TYPES)
def test_a_successor_model_generates_the_same_32_tokens(models, gguf_type):
    """Untied qwen3 whose output layer is the embedding of each token's successor under a fixed permutation, and
    whose layers add little: every step's arg-max has a wide margin, so any difference is a bug, not rounding."""
    root, _ = models
    path = root / f"successor-{gguf_type}"
    if not path.exists():
        config = {**FAMILIES["qwen3"], "tie_word_embeddings": False}
        make_model(path, config, 7)
        weights = st.load_file(path / "model.safetensors")
        rng = np.random.default_rng(7)
        embed = rng.standard_normal((384, 256)).astype(np.float32)
        successor = rng.permutation(384)
        weights["model.embed_tokens.weight"] = embed
        inverse = np.argsort(successor)
        weights["lm_head.weight"] = embed[inverse] * 0.5  # row v = e_u with successor[u] = v
        for name in weights:
            if name.endswith("proj.weight"):
                weights[name] *= 0.1
        st.save_file(weights, path / "model.safetensors")
    file = export(path, gguf_type, root / f"successor-{gguf_type}.gguf")
    start = [5, 17]
    ids, text = greedy_llama_cpp(file, start, 32, stop_at_eog=False)
    assert len(ids) == 32
    imported = root / f"successor-{gguf_type}-imported"
    run(RQAT_BIN, "convert", "--model", file, "--out", imported, "--tokenizer", TEACHER)
    logits = rqat_logits(imported, start + ids[:-1], root)
    assert list(logits[len(start) - 1:].argmax(1)) == ids, gguf_type


@needs_llama_cpp
def test_llama_cpp_tokenizes_held_text_like_rqat_with_qwen25(tmp_path):
    vocab = SHARED / "tokenizers" / "qwen2.5"
    problems = SHARED / "math500" / "test.jsonl"
    if not (vocab / "vocab.json").exists() or not problems.exists():
        pytest.skip("../shared/data (Qwen2.5 tokenizer, MATH-500) is absent")
    config = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 151936, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "tie_word_embeddings": True, "max_position_embeddings": 4096,
              "eos_token_id": 151645}
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = tmp_path / "model"
    run(RQAT_BIN, "init-model", "--config", tmp_path / "config.json", "--out", model, "--seed", "1")
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(vocab / name, model / name)
    file = export(model, "f16", tmp_path / "qwen25.gguf")
    texts = [json.loads(line)["problem"] for line in problems.read_text().splitlines()[:200]]
    (tmp_path / "held.txt").write_text("\n".join(t.replace("\n", " ") for t in texts) + "\n")
    mine = [list(map(int, line.split())) for line in
            run(RQAT_BIN, "tokenize", "--tokenizer", model, tmp_path / "held.txt").stdout.splitlines()]
    llm = llama_cpp.Llama(model_path=str(file), n_ctx=64, vocab_only=True, verbose=False)
    lines = (tmp_path / "held.txt").read_text().splitlines()
    assert len(mine) == len(lines)
    for line, ids in zip(lines, mine):
        assert llm.tokenize(line.encode(), add_bos=False, special=False) == ids, line


def test_a_type_the_shapes_cannot_hold_is_refused_before_any_work(tmp_path):
    out = tmp_path / "teacher.gguf"
    result = run(RQAT_BIN, "convert", "--model", TEACHER, "--to", "gguf", "--gguf-type", "q4_k", "--out", out,
                 expect=1)
    message = result.stderr.strip()
    assert message.count("\n") == 0 and "--gguf-type q4_k" in message
    assert "model.embed_tokens.weight" in message and "token_embd.weight" in message and "256" in message
    assert not out.exists() and not list(tmp_path.iterdir())
