"""Build tiny random Hugging Face checkpoints plus reference logits for rqat's C++ parity test.

Part of rqat's tests/python helpers: run `python make_hf_fixtures.py --out DIR`; the C++ test then loads
DIR/<case>/model with rqat and compares its logits to DIR/<case>/reference.safetensors.
"""

import argparse
import dataclasses
import inspect
import json
import os
import shutil
import sys

import safetensors.torch
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

# Batch layout shared by every case: B rows of length T, left padded by PAD_COUNTS[b] positions.
BATCH = 3
SEQ = 11
PAD_COUNTS = (0, 3, 6)

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}

COMMON = dict(
    num_hidden_layers=2,
    initializer_range=0.1,  # larger than the 0.02 default so logits differ visibly between positions
    rms_norm_eps=1e-6,
    max_position_embeddings=128,
    hidden_act="silu",
)


def config_accepts_rope_parameters(config_cls):
    """transformers 5.x stores rope settings in one `rope_parameters` dict; 4.x used rope_theta/rope_scaling."""
    if dataclasses.is_dataclass(config_cls):
        return "rope_parameters" in {f.name for f in dataclasses.fields(config_cls)}
    return "rope_parameters" in inspect.signature(config_cls.__init__).parameters


def rope_kwargs(config_cls, theta, scaling=None):
    if config_accepts_rope_parameters(config_cls):
        params = dict(scaling) if scaling else {"rope_type": "default"}
        params["rope_theta"] = theta
        return {"rope_parameters": params}
    kw = {"rope_theta": theta}
    if scaling:
        kw["rope_scaling"] = dict(scaling)
    return kw


CASES = {
    "qwen2_gqa3": dict(
        family="qwen2",
        config_cls=Qwen2Config,
        model_cls=Qwen2ForCausalLM,
        seed=1001,
        shard=None,
        kwargs=dict(
            hidden_size=48,
            num_attention_heads=6,
            num_key_value_heads=2,  # GQA ratio 3
            intermediate_size=80,
            vocab_size=250,
            tie_word_embeddings=False,
            **rope_kwargs(Qwen2Config, 10000.0),
        ),
    ),
    "qwen3_headdim": dict(
        family="qwen3",
        config_cls=Qwen3Config,
        model_cls=Qwen3ForCausalLM,
        seed=1002,
        shard=None,
        kwargs=dict(
            hidden_size=40,
            num_attention_heads=3,
            num_key_value_heads=1,
            head_dim=16,  # deliberately != hidden/heads so a loader that derives it is caught
            intermediate_size=72,
            vocab_size=199,
            tie_word_embeddings=True,
            **rope_kwargs(Qwen3Config, 1000000.0),
        ),
    ),
    "llama_rope3_sharded": dict(
        family="llama",
        config_cls=LlamaConfig,
        model_cls=LlamaForCausalLM,
        seed=1003,
        shard="100KB",
        kwargs=dict(
            hidden_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=96,
            vocab_size=301,
            tie_word_embeddings=False,
            **rope_kwargs(LlamaConfig, 500000.0, LLAMA3_SCALING),
        ),
    ),
}


def make_inputs(vocab, gen):
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=gen, dtype=torch.int64)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    for b, npad in enumerate(PAD_COUNTS):
        ids[b, :npad] = 0
        mask[b, :npad] = 0
    return ids, mask


def generate_positions(mask):
    # Same convention as `generate`: real tokens count from 0, pad slots are clamped to 0.
    return (mask.cumsum(-1) - 1).clamp(min=0)


def perturb(model, family):
    """Move parameters that random init leaves trivial (zero biases, unit norms) away from their defaults."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.1)
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    if family == "qwen2":
        assert any(n.endswith("q_proj.bias") for n, _ in model.named_parameters()), "qwen2 should have q/k/v bias"


def unscaled_inv_freq(theta, head_dim):
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))


def find_rotary_inv_freq(model):
    for name, buf in model.named_buffers():
        if name.endswith("rotary_emb.inv_freq"):
            return buf
    raise AssertionError("model has no rotary_emb.inv_freq buffer")


def save_model(model, path, shard):
    kw = {}
    # `safe_serialization` was dropped in transformers 5 (safetensors is the only format); pass it only if known.
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kw["safe_serialization"] = True
    if shard:
        kw["max_shard_size"] = shard
    model.save_pretrained(path, **kw)


def build_case(name, spec, out_dir):
    case_dir = os.path.join(out_dir, name)
    model_dir = os.path.join(case_dir, "model")
    if os.path.exists(case_dir):
        shutil.rmtree(case_dir)
    os.makedirs(model_dir)

    torch.manual_seed(spec["seed"])
    config = spec["config_cls"](**COMMON, **spec["kwargs"])
    config._attn_implementation = "eager"
    model = spec["model_cls"](config).to(torch.float32).eval()
    perturb(model, spec["family"])

    # Check the rope scaling really reached the module, not only the config dict.
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    inv_freq = find_rotary_inv_freq(model).float().cpu()
    theta = spec["kwargs"].get("rope_parameters", {}).get("rope_theta", spec["kwargs"].get("rope_theta"))
    plain = unscaled_inv_freq(theta, head_dim)
    if spec["family"] == "llama":
        assert not torch.allclose(inv_freq, plain), "llama3 rope scaling did not change inv_freq"
    else:
        assert torch.allclose(inv_freq, plain, rtol=1e-6), "unexpected rope scaling on an unscaled case"

    gen = torch.Generator().manual_seed(spec["seed"] + 7)
    ids, mask = make_inputs(config.vocab_size, gen)
    with torch.no_grad():
        logits = model(
            input_ids=ids, attention_mask=mask, position_ids=generate_positions(mask), use_cache=False
        ).logits.float()
    assert logits.shape == (BATCH, SEQ, config.vocab_size), logits.shape
    assert torch.isfinite(logits).all(), "non-finite reference logits"

    save_model(model, model_dir, spec["shard"])

    files = sorted(os.listdir(model_dir))
    shards = [f for f in files if f.startswith("model-") and f.endswith(".safetensors")]
    if spec["shard"]:
        assert len(shards) >= 2, f"expected several shards, got {files}"
        assert "model.safetensors.index.json" in files, files
    else:
        assert "model.safetensors" in files, files
    n_shards = max(len(shards), 1)

    # Tied models must save their embedding exactly once; note what the loader will find.
    tied = bool(config.tie_word_embeddings)
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    safetensors.torch.save_file(
        {"input_ids": ids.contiguous(), "attention_mask": mask.contiguous(), "logits": logits.contiguous()},
        os.path.join(case_dir, "reference.safetensors"),
        metadata={"format": "pt"},
    )
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        json.dump({"family": spec["family"], "tied": tied, "n_shards": n_shards}, f, indent=2)
        f.write("\n")

    real = mask.bool()
    print(
        f"{name}: family={spec['family']} tied={tied} shards={n_shards} vocab={config.vocab_size} "
        f"head_dim={head_dim} logits_absmax={logits[real].abs().max().item():.4f} "
        f"logits_std={logits[real].std().item():.4f}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory (one subdirectory per case)")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="only build these cases")
    args = ap.parse_args(argv)

    os.makedirs(args.out, exist_ok=True)
    stamp = os.path.join(args.out, ".complete")
    if os.path.exists(stamp):
        os.remove(stamp)  # a rerun that fails half way must not look finished

    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for name in args.case or CASES:
        build_case(name, CASES[name], args.out)

    with open(stamp, "w") as f:
        f.write(f"transformers {transformers.__version__}\ntorch {torch.__version__}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
