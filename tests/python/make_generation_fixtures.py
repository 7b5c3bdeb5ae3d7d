"""Tiny random Hugging Face models plus transformers' greedy generations, for rqat's generation parity test.

Part of rqat's tests/python helpers: run `python make_generation_fixtures.py --out DIR`; the C++ test
(tests/test_generation_parity.cpp) loads DIR/<case>/model with rqat, generates greedily from the prompts in
DIR/<case>/generation.json and requires the exact tokens of `model.generate(..., do_sample=False)`.

The models are built by make_hf_fixtures.py (same configs and perturbation). EOS is disabled so every row
runs the full MAX_NEW tokens. The batch is left padded; each prompt is also generated alone and must agree,
and every greedy step must have a margin between the two best logits (else another prompt seed is tried),
so float differences of ~1e-6 between implementations cannot flip a token.
"""

import argparse
import json
import os
import shutil
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_fixtures as hf  # noqa: E402  (reused: model configs, perturbation, saving)

MAX_NEW = 32
PROMPT_LENGTHS = (3, 9, 14, 6)
MIN_MARGIN = 1e-3  # smallest allowed gap between the best and second-best logit at a greedy step
# Larger weights than make_hf_fixtures' 0.1: sharper logits, fewer near-ties, less repetitive text.
INITIALIZER_RANGE = 0.25


def build_model(spec):
    torch.manual_seed(spec["seed"])
    config = spec["config_cls"](**dict(hf.COMMON, initializer_range=INITIALIZER_RANGE), **spec["kwargs"])
    config._attn_implementation = "eager"
    model = spec["model_cls"](config).to(torch.float32).eval()
    hf.perturb(model, spec["family"])
    # No EOS: generation always runs MAX_NEW tokens (and nothing masks a token out).
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.generation_config.bos_token_id = None
    return model, config


def left_pad(prompts):
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.int64)
    mask = torch.zeros(len(prompts), width, dtype=torch.int64)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.tensor(p)
        mask[b, width - len(p):] = 1
    return ids, mask


def greedy(model, prompts):
    """Greedy tokens of each row and the smallest top-2 logit margin over all steps and rows."""
    ids, mask = left_pad(prompts)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=MAX_NEW,
            min_new_tokens=None,
            eos_token_id=None,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
    tokens = out.sequences[:, ids.shape[1]:]
    assert tokens.shape == (len(prompts), MAX_NEW), tokens.shape
    scores = torch.stack(out.scores, 1)  # (B, MAX_NEW, vocab), raw logits for greedy without processors
    top2 = scores.topk(2, dim=-1).values
    margin = (top2[..., 0] - top2[..., 1]).min().item()
    return tokens.tolist(), margin


def build_case(name, spec, out_dir):
    case_dir = os.path.join(out_dir, name)
    if os.path.exists(case_dir):
        shutil.rmtree(case_dir)
    os.makedirs(case_dir)
    model, config = build_model(spec)

    for attempt in range(20):
        gen = torch.Generator().manual_seed(spec["seed"] * 100 + attempt)
        prompts = [torch.randint(0, config.vocab_size, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
        batched, margin = greedy(model, prompts)
        alone = []
        for p in prompts:
            tokens, m = greedy(model, [p])
            alone.append(tokens[0])
            margin = min(margin, m)
        if batched == alone and margin >= MIN_MARGIN:
            break
        print(f"{name}: attempt {attempt} rejected (batched == alone: {batched == alone}, margin {margin:.2e})")
    else:
        raise SystemExit(f"{name}: no prompt set with agreeing, well-separated greedy generations")

    hf.save_model(model, os.path.join(case_dir, "model"), None)
    with open(os.path.join(case_dir, "generation.json"), "w") as f:
        json.dump(
            {"family": spec["family"], "max_new_tokens": MAX_NEW, "prompts": prompts, "expected": batched,
             "min_margin": margin},
            f,
        )
        f.write("\n")
    distinct = len({t for row in batched for t in row})
    print(f"{name}: {len(prompts)} prompts, {MAX_NEW} greedy tokens each, {distinct} distinct tokens, "
          f"min top-2 margin {margin:.4f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory (one subdirectory per case)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    stamp = os.path.join(args.out, ".complete")
    if os.path.exists(stamp):
        os.remove(stamp)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for name, spec in hf.CASES.items():
        build_case(name, spec, args.out)
    with open(stamp, "w") as f:
        f.write(f"transformers {transformers.__version__}\ntorch {torch.__version__}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
