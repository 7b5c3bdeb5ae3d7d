"""llm-compressor's own PTQ of a model directory, the peer of rqat's `ptq` in tests/python/test_llmcompressor_peer.py.

Runs in its own interpreter with PYTHONPATH=.venv/peers/llmcompressor (llm-compressor 0.14.0.1 and the
compressed-tensors 0.19.0 it pins, installed there with --no-deps: scripts/requirements-peers-isolated.txt), because the
test's process has already imported the compressed-tensors of .venv (0.20.1). On the CPU.

    llmcompressor_peer_run.py --model DIR [--calib FILE] --job JOB [--job JOB ...]
                              [--damp 0.01] [--block-size 128] [--threads N]
    JOB = METHOD[,OPTION...]:SCHEME:OUT

Every job loads the model afresh (float32) and quantizes its Linear layers but lm_head with METHOD
  rtn   QuantizationModifier: the weights' min/max, rounded to nearest (the scheme's reference quantization)
  gptq  GPTQModifier: the sequential pipeline (one decoder layer at a time), --damp, --block-size
in SCHEME, the weight-only scheme rqat's `ptq --grid SCHEME` writes:
  nvfp4       preset NVFP4A16   (FP4 E2M1, groups of 16, FP8 E4M3 scales over an FP32 global scale)
  mxfp4       preset MXFP4A16   (FP4 E2M1, groups of 32, E8M0 scales)
  fp8         FP8 E4M3 weights with one scale per output channel (FP8_DYNAMIC's weights, without its activations)
  int4-w4a16  preset W4A16      (INT4 symmetric, groups of 128)
and writes it compressed (save_pretrained(save_compressed=True)) to OUT. OPTIONs:
  actorder=static|none  gptq's activation order (default static, llm-compressor's own default, an alias of "weight")
  mx=ocp                the E8M0 scales by OCP MX's rule, 2^(floor(log2 amax) - 2) (rqat's), in place of
                        compressed-tensors' generate_mx_scales, which first rounds amax up to a power of two when
                        its significand is >= 1.75: a test instrument separating that convention from the algorithm
--calib is a safetensors file whose "input_ids" (samples x tokens, int64) are the calibration sequences, fed as they
are, in file order, one per batch (gptq needs it; rtn reads no data).
Prints one line per job: "llmcompressor METHOD[,OPTION...] SCHEME OUT SECONDS".
"""

import argparse
import contextlib
import os
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SCHEMES = ("nvfp4", "mxfp4", "fp8", "int4-w4a16")
PRESETS = {"nvfp4": "NVFP4A16", "mxfp4": "MXFP4A16", "int4-w4a16": "W4A16"}
OPTIONS = {"actorder": ("static", "none"), "mx": ("ocp",)}


def config_groups(scheme):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme, preset_name_to_scheme

    if scheme in PRESETS:
        return {"group_0": preset_name_to_scheme(PRESETS[scheme], ["Linear"])}
    weights = QuantizationArgs(num_bits=8, type="float", strategy="channel", symmetric=True, dynamic=False)
    return {"group_0": QuantizationScheme(targets=["Linear"], weights=weights)}


@contextlib.contextmanager
def ocp_mx_scales():
    """compressed-tensors' MX scales replaced by OCP MX v1.0's: biased exponent 127 + floor(log2 amax) - emax_elem."""
    import torch
    from compressed_tensors.quantization.utils import helpers, mxfp_utils

    def generate_ocp_mx_scales(x, num_bits=4):
        _, exponent = torch.frexp(x)  # x = m 2^e with m in [0.5, 1): floor(log2 x) = e - 1, exactly
        biased = 127 + exponent.to(x.dtype) - 1 - mxfp_utils._MX_ELEM_OFFSET[num_bits]
        return torch.where(x > 0, biased, torch.zeros_like(x))  # an all-zero block: 2^-127, as theirs

    original = helpers.generate_mx_scales
    helpers.generate_mx_scales = generate_ocp_mx_scales
    try:
        yield
    finally:
        helpers.generate_mx_scales = original


def run_job(args, job, calib):
    import torch
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    groups = config_groups(job["scheme"])
    data = {}
    if job["method"] == "rtn":
        modifier = QuantizationModifier(config_groups=groups, ignore=["lm_head"])
    else:
        if calib is None:
            sys.exit("gptq needs --calib")
        actorder = job["options"].get("actorder", "static")
        modifier = GPTQModifier(config_groups=groups, ignore=["lm_head"], block_size=args.block_size,
                                dampening_frac=args.damp, actorder=None if actorder == "none" else actorder)
        from datasets import Dataset

        ids = calib.tolist()
        data = {"dataset": Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(r) for r in ids]}),
                "num_calibration_samples": len(ids), "max_seq_length": len(ids[0]),
                "shuffle_calibration_samples": False, "batch_size": 1, "pipeline": "sequential"}
    start = time.perf_counter()
    with ocp_mx_scales() if job["options"].get("mx") == "ocp" else contextlib.nullcontext():
        oneshot(model=model, recipe=[modifier], output_dir=job["out"], save_compressed=True, **data)
    print(f"llmcompressor {job['name']} {job['scheme']} {job['out']} {time.perf_counter() - start:.2f}", flush=True)


def parse_job(text):
    head, _, rest = text.partition(":")
    scheme, _, out = rest.partition(":")
    method, *options = head.split(",")
    if method not in ("rtn", "gptq") or scheme not in SCHEMES or not out:
        raise ValueError(f"expected METHOD[,OPTION...]:SCHEME:OUT with METHOD rtn or gptq, SCHEME one of {SCHEMES}")
    parsed = {}
    for option in options:
        key, _, value = option.partition("=")
        if value not in OPTIONS.get(key, ()) or (key == "actorder" and method != "gptq"):
            raise ValueError(f"option {option!r}: expected actorder=static|none (gptq) or mx=ocp")
        parsed[key] = value
    return {"method": method, "options": parsed, "scheme": scheme, "out": out, "name": head}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--calib", help="safetensors file with input_ids (samples x tokens, int64)")
    parser.add_argument("--job", action="append", required=True, help="METHOD[,OPTION...]:SCHEME:OUT")
    parser.add_argument("--damp", type=float, default=0.01, help="GPTQ dampening_frac (its default 0.01)")
    parser.add_argument("--block-size", type=int, default=128, help="GPTQ block_size (its default 128)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    jobs = []
    for text in args.job:
        try:
            jobs.append(parse_job(text))
        except ValueError as e:
            parser.error(f"--job {text!r}: {e}")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    calib = None
    if args.calib:
        from safetensors.torch import load_file

        calib = load_file(args.calib)["input_ids"].to(torch.int64)
        if calib.dim() != 2:
            sys.exit(f"{args.calib}: input_ids must be (samples, tokens), got {tuple(calib.shape)}")
    import compressed_tensors
    import llmcompressor

    print(f"llmcompressor {llmcompressor.__version__}, compressed-tensors {compressed_tensors.__version__}, "
          f"torch {torch.__version__}", flush=True)
    for job in jobs:
        run_job(args, job, calib)


if __name__ == "__main__":
    main()
