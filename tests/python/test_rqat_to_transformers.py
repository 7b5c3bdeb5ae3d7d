"""Reverse parity test: checkpoints written by `rqat init-model` must load in Hugging Face transformers
and give the same logits as `rqat logits`. Lives in rqat's tests/python; needs RQAT_BIN=<path to rqat>.
Run: RQAT_BIN=build/apps/rqat .venv/bin/python -m pytest -v -s tests/python/test_rqat_to_transformers.py
"""

import json
import math
import os
import subprocess

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not (os.path.isfile(RQAT_BIN) and os.access(RQAT_BIN, os.X_OK)):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)

RQAT_DEVICE = os.environ.get("RQAT_DEVICE", "")  # optional: passed to `rqat logits --device`

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402  (only worth importing when we run)

TOL = 1e-4
BATCH, SEQ = 3, 11
PAD_COUNTS = (0, 3, 6)  # left padding per row, same layout as make_hf_fixtures.py
SUBPROCESS_TIMEOUT_S = 600

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}

# Hand-written config.json dicts in the classic (transformers 4.x) layout, with rope_theta/rope_scaling at top
# level, because that is what most published checkpoints still carry and what rqat must accept.
CONFIGS = {
    "qwen2_gqa3": {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 48,
        "intermediate_size": 80,
        "num_hidden_layers": 2,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,  # GQA ratio 3
        "vocab_size": 250,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 128,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "initializer_range": 0.1,
        "use_sliding_window": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    "qwen3_headdim": {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 40,
        "intermediate_size": 72,
        "num_hidden_layers": 2,
        "num_attention_heads": 3,
        "num_key_value_heads": 1,
        "head_dim": 16,  # != hidden_size / heads on purpose
        "vocab_size": 199,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 128,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "initializer_range": 0.1,
        "attention_bias": False,
        "use_sliding_window": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    "llama_rope3_sharded": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 301,
        "rms_norm_eps": 1e-6,
        "rope_theta": 500000.0,
        "rope_scaling": dict(LLAMA3_SCALING),
        "max_position_embeddings": 128,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "initializer_range": 0.1,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
}

# The llama case is written in shards: 0.05 MB is below the 77 KB embedding, so several files must appear.
SHARD_MB = {"llama_rope3_sharded": "0.05"}
SEEDS = {"qwen2_gqa3": 11, "qwen3_headdim": 12, "llama_rope3_sharded": 13}


def run_rqat(*args):
    cmd = [RQAT_BIN, *map(str, args)]
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"{' '.join(cmd)} exited {e.returncode}\n--- stdout ---\n{e.stdout}\n--- stderr ---\n{e.stderr}")
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} timed out after {e.timeout}s\n--- stdout ---\n{e.stdout}\n--- stderr ---\n{e.stderr}")


def make_inputs(vocab, seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    for b, npad in enumerate(PAD_COUNTS):
        ids[b, :npad] = 0
        mask[b, :npad] = 0
    return ids, mask


def generate_positions(mask):
    # The convention of transformers' `generate` for left padding; rqat logits uses the same.
    return (mask.cumsum(-1) - 1).clamp(min=0)


def write_config(tmp_path, case):
    cfg_path = tmp_path / f"{case}.config.json"
    cfg_path.write_text(json.dumps(CONFIGS[case], indent=2))
    return cfg_path


def init_model(tmp_path, case, dtype=None):
    out = tmp_path / f"{case}_model"
    args = ["init-model", "--config", write_config(tmp_path, case), "--out", out, "--seed", SEEDS[case]]
    if dtype:
        args += ["--dtype", dtype]
    if case in SHARD_MB:
        args += ["--max-shard-mb", SHARD_MB[case]]
    run_rqat(*args)
    return out


def rqat_logits(tmp_path, model_dir, ids, mask, vocab):
    inp = tmp_path / "input.safetensors"
    out = tmp_path / "rqat_logits.safetensors"
    save_file({"input_ids": ids.contiguous(), "attention_mask": mask.contiguous()}, str(inp), metadata={"format": "pt"})
    # Always f32 math: rqat's default compute dtype may follow the device (bf16 on CUDA).
    args = ["logits", "--model", model_dir, "--input", inp, "--out", out, "--dtype", "f32"]
    if RQAT_DEVICE:
        args += ["--device", RQAT_DEVICE]
    run_rqat(*args)
    logits = load_file(str(out))["logits"]
    assert logits.dtype == torch.float32, logits.dtype
    assert tuple(logits.shape) == (BATCH, SEQ, vocab), tuple(logits.shape)
    return logits


def load_hf(model_dir, dtype):
    model, info = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=dtype, attn_implementation="eager", output_loading_info=True
    )
    # A key rqat forgot would be silently random-initialised by transformers; an extra one would be ignored.
    assert not info["missing_keys"], f"missing in rqat checkpoint: {sorted(info['missing_keys'])}"
    assert not info["unexpected_keys"], f"unexpected in rqat checkpoint: {sorted(info['unexpected_keys'])}"
    assert not info["mismatched_keys"], f"shape mismatch: {sorted(info['mismatched_keys'])}"
    return model.eval()


def hf_logits(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=generate_positions(mask), use_cache=False)
    return out.logits.float()


def compare(case, ours, ref, mask):
    # Pad positions are excluded: their outputs are arbitrary (masked queries) in both implementations.
    real = mask.bool()
    assert torch.isfinite(ours[real]).all(), "rqat produced non-finite logits"
    # Guard against a vacuous pass (e.g. all-zero weights giving identical flat logits on both sides).
    assert ref[real].std().item() > 1e-2, f"reference logits are nearly constant (std {ref[real].std().item():.3g})"
    diff = (ours - ref).abs()[real].max().item()
    print(f"{case}: max |rqat - transformers| over non-pad positions = {diff:.3e} (tol {TOL:g})")
    assert diff <= TOL, f"{case}: max diff {diff:.3e} > {TOL:g}"


def safetensors_files(model_dir):
    return sorted(p for p in os.listdir(model_dir) if p.endswith(".safetensors"))


def tensor_dtypes(model_dir):
    dtypes = {}
    for fname in safetensors_files(model_dir):
        with safe_open(os.path.join(model_dir, fname), "pt") as f:
            for k in f.keys():
                dtypes[k] = f.get_slice(k).get_dtype()
    return dtypes


def hf_rope_dict(cfg):
    # transformers >= 5 folds rope_theta/rope_scaling into `rope_parameters`; 4.x keeps them apart.
    params = getattr(cfg, "rope_parameters", None)
    if params:
        return dict(params)
    merged = dict(getattr(cfg, "rope_scaling", None) or {})
    merged["rope_theta"] = cfg.rope_theta
    return merged


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_init_model_matches_transformers(tmp_path, case):
    model_dir = init_model(tmp_path, case)
    assert (model_dir / "config.json").is_file()
    assert (model_dir / "generation_config.json").is_file()

    if case in SHARD_MB:
        index = model_dir / "model.safetensors.index.json"
        assert index.is_file(), f"no shard index, files: {sorted(os.listdir(model_dir))}"
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = set(weight_map.values())
        assert len(shards) >= 2, f"expected several shards at {SHARD_MB[case]} MB, got {shards}"
        assert shards == set(safetensors_files(model_dir)), (shards, safetensors_files(model_dir))
    else:
        assert (model_dir / "model.safetensors").is_file(), sorted(os.listdir(model_dir))

    cfg = AutoConfig.from_pretrained(str(model_dir))
    assert cfg.model_type == CONFIGS[case]["model_type"]
    assert bool(cfg.tie_word_embeddings) == CONFIGS[case]["tie_word_embeddings"]
    if "head_dim" in CONFIGS[case]:
        assert cfg.head_dim == CONFIGS[case]["head_dim"]
    rope = hf_rope_dict(cfg)
    assert math.isclose(rope["rope_theta"], CONFIGS[case]["rope_theta"]), rope
    if case.startswith("llama"):
        for key, val in LLAMA3_SCALING.items():
            assert rope.get(key) == val, f"transformers sees rope {rope}, expected {key}={val}"
    else:
        assert rope.get("rope_type", "default") == "default", rope

    vocab = CONFIGS[case]["vocab_size"]
    ids, mask = make_inputs(vocab, SEEDS[case] + 100)
    ours = rqat_logits(tmp_path, model_dir, ids, mask, vocab)

    model = load_hf(model_dir, torch.float32)
    if CONFIGS[case]["tie_word_embeddings"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    else:
        # Untied checkpoints must carry their own head, not a copy of the embedding.
        assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    compare(case, ours, hf_logits(model, ids, mask), mask)


def test_bf16_checkpoint_f32_math(tmp_path):
    case = "qwen2_gqa3"  # has q/k/v biases, so bias tensors go through the bf16 path too
    model_dir = init_model(tmp_path, case, dtype="bf16")

    dtypes = tensor_dtypes(model_dir)
    assert dtypes and all(d == "BF16" for d in dtypes.values()), f"non-bf16 tensors: {dtypes}"
    saved = json.loads((model_dir / "config.json").read_text())
    for key in ("dtype", "torch_dtype"):  # transformers 5 writes `dtype`, 4.x wrote `torch_dtype`
        if key in saved:
            assert saved[key] == "bfloat16", f"config.json {key}={saved[key]!r} for a bf16 checkpoint"

    # The checkpoint must load natively in bf16 ...
    bf16_model = load_hf(model_dir, torch.bfloat16)
    assert bf16_model.model.embed_tokens.weight.dtype == torch.bfloat16
    del bf16_model

    # ... and, upcast to f32 on both sides, the math must agree as tightly as for an f32 checkpoint.
    vocab = CONFIGS[case]["vocab_size"]
    ids, mask = make_inputs(vocab, SEEDS[case] + 200)
    ours = rqat_logits(tmp_path, model_dir, ids, mask, vocab)
    ref = hf_logits(load_hf(model_dir, torch.float32), ids, mask)
    compare(case + "_bf16", ours, ref, mask)


def test_transformers_model_resaved_by_rqat(tmp_path):
    """A transformers model with non-zero biases and non-unit norms, re-saved by `rqat convert` in
    shards, loads back in transformers with bit-identical weights and logits: the names, shapes and
    bytes that rqat writes are the ones transformers reads."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(5)
    cfg = Qwen2Config(**{k: v for k, v in CONFIGS["qwen2_gqa3"].items() if k not in ("model_type", "architectures")})
    src = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in src.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0, 0.1)
            elif "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    src_dir, out_dir = tmp_path / "src", tmp_path / "resaved"
    src.save_pretrained(str(src_dir))
    run_rqat("convert", "--model", src_dir, "--out", out_dir, "--max-shard-mb", "0.05")
    assert (out_dir / "model.safetensors.index.json").is_file()

    resaved = load_hf(out_dir, torch.float32)
    for (name, a), (_, b) in zip(src.state_dict().items(), resaved.state_dict().items()):
        assert torch.equal(a, b), f"{name} changed in rqat's re-save"
    ids, mask = make_inputs(cfg.vocab_size, 77)
    ref = hf_logits(load_hf(src_dir, torch.float32), ids, mask)  # same attention implementation as below
    assert torch.equal(hf_logits(resaved, ids, mask), ref)
    compare("qwen2_resaved", rqat_logits(tmp_path, out_dir, ids, mask, cfg.vocab_size), ref, mask)
