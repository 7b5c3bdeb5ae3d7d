#!/usr/bin/env python3
"""The peer of bench/bench_generate: transformers' generate on the same model directory and the same
prompts (a JSON file {"prompts": [[ids...], ...]}), EOS disabled so every row generates
--max-new-tokens tokens. Prompts of different lengths are left-padded with an attention mask, as
transformers expects for batched generation. Prints generated tokens/s over the wall time of
generate() (device synchronized, prefill included: as bench_generate measures rqat), and a line
"RESULT tokens_per_s=..." for scripts.

Used by scripts/bench_generate (CPU: sampling with top-p, several samples per prompt through
num_return_sequences) and scripts/gpu-check (CUDA, bf16, greedy, cache_implementation="static").
With --wheels (the wheels/ of scripts/gpu-bundle) and a Python that cannot import transformers, the
wheels are installed into --site, a throwaway directory put first on sys.path and PYTHONPATH of
this process only: pip install --no-index --no-deps --target, or, without pip, unzipped.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time
import zipfile


def install_wheels(wheels: str, site: str) -> None:
    """Installs wheels/packages.txt's packages from `wheels` into `site` (emptied first)."""
    names = open(os.path.join(wheels, "packages.txt")).read().split()
    if os.path.isdir(site):
        import shutil
        shutil.rmtree(site)
    os.makedirs(site)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    have_pip = subprocess.run([sys.executable, "-m", "pip", "--version"],
                              capture_output=True).returncode == 0
    for name in names:  # one by one: a missing wheel (pyyaml for this CPython) spares the others
        if have_pip:
            r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                "--no-compile", "--disable-pip-version-check", "--find-links", wheels,
                                "--target", site, name], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"bench_generate_reference: {name}: {r.stderr.strip().splitlines()[-1:]}",
                      file=sys.stderr)
            continue
        # No pip: a wheel is a zip laid out for site-packages.
        norm = name.lower().replace("-", "_")
        files = [f for f in glob.glob(os.path.join(wheels, "*.whl"))
                 if os.path.basename(f).split("-")[0].lower() == norm]
        fit = [f for f in files if "-py3-none-" in f or "-abi3-" in f or f"-{tag}-" in f]
        if fit:
            zipfile.ZipFile(fit[0]).extractall(site)
        else:
            print(f"bench_generate_reference: no wheel of {name} for {tag}", file=sys.stderr)
    print(f"transformers: installed the bundled wheels into {site} "
          f"({'pip' if have_pip else 'unzipped'})", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompts", required=True)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--samples", type=int, default=1, help="num_return_sequences per prompt")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0: off (transformers' default is 50)")
    p.add_argument("--cache-implementation", default="dynamic", choices=["dynamic", "static"])
    p.add_argument("--compile", default="auto", choices=["auto", "off"],
                   help="static cache on CUDA: transformers compiles the decoding step (auto) or not")
    p.add_argument("--repeats", type=int, default=1, help="timed runs; the best is reported")
    p.add_argument("--warmup-tokens", type=int, default=8, help="untimed run first (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--wheels", help="wheels to install when transformers is missing")
    p.add_argument("--site", help="throwaway directory for them (with --wheels)")
    args = p.parse_args()

    import torch
    try:
        import transformers
    except ImportError:
        if not (args.wheels and args.site):
            raise
        install_wheels(args.wheels, args.site)
        for m in [m for m in sys.modules if m.split(".")[0] in ("transformers", "huggingface_hub")]:
            del sys.modules[m]  # half-imported before
        import importlib
        importlib.invalidate_caches()
        sys.path.insert(0, args.site)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [args.site] + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x])
        try:
            import transformers
        except Exception as e:  # the caller reports why the peer is missing
            print(f"bench_generate_reference: cannot import transformers: {type(e).__name__}: {e}",
                  file=sys.stderr)
            return 3

    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bars in the logs
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    # .to(dtype) too: a transformers older than 4.56 (a GPU image's own) ignores dtype= above.
    model = model.to(device=device, dtype=dtype).eval()
    gc = model.generation_config
    gc.eos_token_id = None  # EOS disabled, as in bench_generate
    gc.pad_token_id = 0

    prompts = json.load(open(args.prompts))["prompts"]
    longest = max(len(x) for x in prompts)
    ids = torch.zeros((len(prompts), longest), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, x in enumerate(prompts):  # left padding
        ids[i, longest - len(x):] = torch.tensor(x)
        mask[i, longest - len(x):] = 1
    ids, mask = ids.to(device), mask.to(device)

    kw = dict(attention_mask=mask, eos_token_id=None, pad_token_id=0,
              num_return_sequences=args.samples)
    if args.temperature > 0:
        kw.update(do_sample=True, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)
    else:
        kw.update(do_sample=False)
    if args.cache_implementation == "static":
        gc.cache_implementation = "static"
        # One cache size for the warm-up and the timed runs, so the compiled step is reused.
        if hasattr(gc, "max_cache_len"):
            gc.max_cache_len = longest + args.max_new_tokens
        if args.compile == "off" and hasattr(gc, "disable_compile"):
            gc.disable_compile = True

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    torch.manual_seed(args.seed)
    with torch.inference_mode():
        if args.warmup_tokens > 0:
            t0 = time.perf_counter()
            model.generate(ids, max_new_tokens=min(args.warmup_tokens, args.max_new_tokens), **kw)
            sync()
            print(f"transformers: warm-up {time.perf_counter() - t0:.1f} s", flush=True)
        best, best_s, tokens = 0.0, 0.0, 0
        for _ in range(args.repeats):
            sync()
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=args.max_new_tokens, **kw)
            sync()
            dt = time.perf_counter() - t0
            n = (out.shape[1] - ids.shape[1]) * out.shape[0]
            if n / dt > best:
                best, best_s, tokens = n / dt, dt, n
    how = ("greedy" if args.temperature <= 0 else
           f"temperature {args.temperature}, top-p {args.top_p}, top-k {args.top_k}")
    print(f"transformers {transformers.__version__} (torch {torch.__version__}): {len(prompts)} prompts x "
          f"{args.samples} samples, {device} {args.dtype}, {torch.get_num_threads()} threads, "
          f"{args.cache_implementation} cache, {how}: {tokens} tokens in {best_s:.3f} s = "
          f"{best:.1f} tokens/s")
    print(f"RESULT tokens_per_s={best:.3f}")
    print(f"RESULT transformers_version={transformers.__version__} torch_version={torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
