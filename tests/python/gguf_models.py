"""Tiny qwen2 / qwen3 / llama models of hidden size 256 for the GGUF tests, and the two ways of reading their logits
(rqat's forward and llama.cpp's, through llama-cpp-python). Shared by test_gguf_export.py and test_gguf_grid_cli.py.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import safetensors.numpy as st

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
from llama_cpp_peer import import_llama_cpp  # noqa: E402

llama_cpp = import_llama_cpp()  # None when llama-cpp-python is absent (the test setup installs it)

RQAT_BIN = os.environ.get("RQAT_BIN", "")
ROOT = pathlib.Path(__file__).resolve().parents[2]
TEACHER = ROOT / "experiments" / "tiny" / "teacher"  # trained; its byte-level BPE tokenizer

BASE = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 384, "rms_norm_eps": 1e-6, "max_position_embeddings": 512,
        "bos_token_id": 256, "eos_token_id": 258}
FAMILIES = {
    "qwen2": {**BASE, "model_type": "qwen2", "rope_theta": 1000000.0, "tie_word_embeddings": False},
    "qwen3": {**BASE, "model_type": "qwen3", "head_dim": 64, "rope_theta": 1000000.0, "tie_word_embeddings": True},
    "llama": {**BASE, "model_type": "llama", "head_dim": 64, "rope_theta": 500000.0, "tie_word_embeddings": False,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
}
GGUF_LAYER = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
              "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
              "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
GGUF_MODEL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}
PROMPT = list(range(3, 120, 4))  # 30 token ids of the tiny vocabulary


def run(*args, expect=0):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)
    assert result.returncode == expect, result.stderr + result.stdout
    return result


def hf_name(gguf_name):
    if gguf_name in GGUF_MODEL:
        return GGUF_MODEL[gguf_name]
    _, layer, part, suffix = gguf_name.split(".")
    return f"model.layers.{layer}.{GGUF_LAYER[part]}.{suffix}"


def rotate_half_rows(w, heads):
    """llama.cpp's interleaved q/k rows back to Hugging Face's rotate-half order (numpy, independent of rqat)."""
    d = w.shape[0] // heads
    return w.reshape(heads, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_model(path, config, seed):
    """A random model of `config` with non-trivial norms and biases, the teacher's tokenizer beside it."""
    (path.parent / f"{path.name}.json").write_text(json.dumps(config))
    run(RQAT_BIN, "init-model", "--config", path.parent / f"{path.name}.json", "--out", path, "--seed", seed,
        "--std", "0.1", "--tokenizer", TEACHER)
    weights = st.load_file(path / "model.safetensors")
    rng = np.random.default_rng(seed)
    for name, w in weights.items():
        if name.endswith("norm.weight"):
            weights[name] = (w + 0.2 * rng.standard_normal(w.shape)).astype(np.float32)
        elif name.endswith(".bias"):
            weights[name] = (0.1 * rng.standard_normal(w.shape)).astype(np.float32)
    # Awkward blocks in one matrix: an all-zero row, a row with one huge outlier, a negative-only row, and rows so
    # small that the blocks' fp16 scales are denormal (below 6.1e-5) or zero.
    up = weights["model.layers.0.mlp.up_proj.weight"]
    up[0] = 0
    up[1, 7] = 10.0  # 100 times the other weights
    up[2] = -np.abs(up[2])
    up[3] *= 1e-4
    up[4] *= 1e-9
    if config["model_type"] == "qwen2":
        assert any(n.endswith("q_proj.bias") for n in weights), "qwen2 models carry q/k/v biases"
    st.save_file(weights, path / "model.safetensors")
    return path


def qwen3_model_and_task(root, seed):
    """A random qwen3 model of make_model under root/model and a small tiny-task split (calibration) under root/task."""
    model = make_model(root / "model", FAMILIES["qwen3"], seed)
    run(RQAT_BIN, "tiny-task", "--out", root / "task", "--seed", "0", "--train", "48", "--test", "4", "--levels", "3")
    return root, model


def export(model, gguf_type, out):
    run(RQAT_BIN, "convert", "--model", model, "--to", "gguf", "--gguf-type", gguf_type, "--out", out)
    return out


def rqat_logits(model_dir, ids, work):
    batch = work / "batch.safetensors"
    st.save_file({"input_ids": np.array([ids], dtype=np.int64),
                  "attention_mask": np.ones((1, len(ids)), dtype=np.int64)}, batch)
    run(RQAT_BIN, "logits", "--model", model_dir, "--input", batch, "--out", work / "logits.safetensors",
        "--device", "cpu", "--kernels", "reference")
    return st.load_file(work / "logits.safetensors")["logits"][0]


def llama_cpp_logits(gguf_file, ids):
    # A float32 KV cache (type 0): llama.cpp's default f16 cache would round keys and values.
    llm = llama_cpp.Llama(model_path=str(gguf_file), n_ctx=128, n_threads=2, logits_all=True, verbose=False,
                          type_k=0, type_v=0)
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)])
