"""The toy GRPO task of the CLI tests: a + b for a, b in 0..2, one answer token from a 14-token vocabulary, and a
tiny random Llama written by transformers (seeded, so every test module gets the same model)."""

import json
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def write_grpo_toy(root: Path) -> Path:
    """Writes root/toy (model and tokenizer) and root/sums.jsonl; returns root."""
    model = root / "toy"
    vocab = {str(d): d for d in range(10)}
    vocab.update({"+": 10, "=": 11, "\u010a": 12, "<|endoftext|>": 13})
    tok = {"version": "1.0", "normalizer": None, "post_processor": None,
           "added_tokens": [{"id": 13, "content": "<|endoftext|>", "special": True, "lstrip": False, "rstrip": False,
                             "single_word": False, "normalized": False}],
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False},
           "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.02, eos_token_id=13,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(str(model))
    (model / "tokenizer.json").write_text(json.dumps(tok))
    (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    with open(root / "sums.jsonl", "w") as f:
        for a in range(3):
            for b in range(3):
                f.write(json.dumps({"problem": f"{a}+{b}=", "answer": str(a + b)}) + "\n")
    return root
