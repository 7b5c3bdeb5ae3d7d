#!/usr/bin/env python3
"""Serves one compressed-tensors checkpoint (ptq/qat --export compressed-tensors, rqat convert --to
compressed-tensors) with vLLM and compares vLLM's greedy tokens with rqat's on the same weights.

scripts/gpu-check's step "serve" runs it once per scheme (nvfp4, fp8, int4-w4a16; mxfp4 on
Blackwell). What it does:
  1. prompts: --prompts rows of --prompt-len random token ids (seeded: the same every run), given
     to both sides as ids, so that no tokenizer takes part (vLLM runs with skip_tokenizer_init);
  2. vLLM (in a child process with its own time limit: a hang at shutdown cannot lose the tokens):
     vllm.LLM(model=CKPT, dtype=the config's torch_dtype when it is bfloat16 or float16, else
     bfloat16, enforce_eager=True, small max_model_len and gpu_memory_utilization), greedy
     (temperature 0), EOS ignored, exactly --new-tokens tokens per prompt, with vLLM's top-5
     logprobs at each position;
  3. rqat: the checkpoint imported back with `rqat convert --model CKPT --out WORK/rqat-import`
     (the served tensors themselves, decoded as rqat decodes them; or --rqat-model), then ONE
     `rqat logits` pass over each prompt followed by vLLM's tokens (--device, --rqat-dtype). rqat's
     greedy token at position i is the argmax of its logits there, given the same prefix. Up to
     the first divergence this is exactly the sequence rqat's own greedy decoding produces; after
     it, rqat keeps being asked about vLLM's prefix, so that one near-tie does not make every later
     token differ. (`rqat generate` takes a text prompt and prints text, bench_generate prints no
     tokens: rqat's batched engine itself is not what is compared here, its model forward is.)
  4. the comparison, per prompt and in all: tokens compared, identical tokens (vLLM's token is
     rqat's argmax), the first divergence position (0: the first new token; free-running greedy
     decodings would part there), at a divergence rqat's logit gap (rqat's max logit minus its logit of vLLM's token)
     and vLLM's own margin between the two tokens when its top-5 holds rqat's; and the largest
     difference between vLLM's logprobs of its top-5 tokens and rqat's log-softmax of them.

Pass rule. A random-weight model's best logits lie close together, so that bf16 rounding and
another kernel's order of summation may swap near-tied tokens: a position AGREES when vLLM's token
is rqat's argmax, or rqat's logit of it lies at most --tol (default 0.2) standard deviations of
rqat's logits at that position below rqat's maximum; the scheme PASSES when at least --min-agree
(default 0.95) of all positions agree. The identical fraction and the first divergences are
reported beside it, not ruled on. Calibrated with --dry-run on the CPU, gpu-check's model (hidden
1024, 4 layers, vocabulary 151,936, random weights), its nvfp4 export, 4 x 16 tokens: the best two
logits lie 0.006-0.52 sd apart (median about 0.15); rqat in bf16 standing in for the server against
rqat in float32: 96.9% identical, 100% agree (its two divergences 0.001 sd and less below the max);
the unquantized model standing in (weights off by the quantization error): 41% identical, 58% agree;
the int4-w4a16 export in place of the nvfp4 one: 8% identical, 23% agree. Wrong weights fail, even
ones as close as the quantization error; rqat's own bf16 rounding stays 200 times inside 0.2 sd
(how far vLLM's kernels stay inside it, a GPU run measures: the gaps are in the report).

--dry-run: no vLLM; rqat's own greedy decoding of --peer-model (default: the imported checkpoint),
by repeated `rqat logits` passes, stands in for vLLM's tokens: the plumbing on a machine without
vLLM or a GPU (scripts/gpu-check --serve-dry-run passes the ptq artifact the checkpoint came from,
so that the dry run also checks export + import against the artifact: 100% identical expected).

Writes WORK/result.json and WORK/section.md (a Markdown section for gpu-check's report) and a
line "RESULT serve_scheme=... serve_tokens=... serve_identical=... serve_agree=... serve_pass=0|1
..." for scripts. Exit status: 0 passed, 1 compared and failed the rule, 2 an error (vLLM or rqat
failed: the reason on stderr and in section.md), 3 vLLM is not importable (no --dry-run).

Usage: scripts/vllm_greedy_check.py --ckpt OUT/compressed-tensors --work DIR [--scheme NAME]
         [--rqat build/apps/rqat] [--rqat-model DIR] [--device cuda] [--rqat-dtype bf16]
         [--prompts 4] [--prompt-len 16] [--new-tokens 32] [--seed 0] [--tol 0.2]
         [--min-agree 0.95] [--vllm-dtype auto] [--max-model-len 256]
         [--gpu-memory-utilization 0.3] [--vllm-timeout 300]
         [--dry-run [--peer-model DIR] [--peer-dtype bf16|f32]]
"""
import argparse
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg: str) -> None:
    print(f"vllm_greedy_check: {msg}", file=sys.stderr, flush=True)


# The vLLM child runs in its own session (its engine processes with it): ended with this script,
# also when a time limit's SIGTERM ends this script.
CHILDREN = []


def end_children(signum=None, frame=None) -> None:
    for pid in CHILDREN:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if signum is not None:
        sys.exit(128 + signum)


# --- safetensors, written and read with the standard library and torch only (no numpy needed).
def write_ids(path: str, rows: list) -> None:
    """input_ids and attention_mask (int64, B x T) of equal-length rows, for `rqat logits`."""
    b, t = len(rows), len(rows[0])
    ids = struct.pack(f"<{b * t}q", *[x for r in rows for x in r])
    mask = struct.pack(f"<{b * t}q", *([1] * (b * t)))
    header = {"input_ids": {"dtype": "I64", "shape": [b, t], "data_offsets": [0, len(ids)]},
              "attention_mask": {"dtype": "I64", "shape": [b, t],
                                 "data_offsets": [len(ids), len(ids) + len(mask)]}}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + ids + mask)


def read_logits(path: str):
    """The 'logits' tensor (float32, B x T x V) that `rqat logits` wrote."""
    import torch
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    meta = header["logits"]
    if meta["dtype"] != "F32":
        raise ValueError(f"{path}: logits are {meta['dtype']}, expected F32")
    begin, end = meta["data_offsets"]
    return torch.frombuffer(data, dtype=torch.float32, offset=begin,
                            count=(end - begin) // 4).view(meta["shape"])


def read_config(ckpt: str) -> dict:
    with open(os.path.join(ckpt, "config.json")) as f:
        return json.load(f)


def make_prompts(n: int, length: int, vocab: int, seed: int) -> list:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(n)]


# --- rqat
def run_tool(cmd: list, log_path: str, timeout: float) -> None:
    """Runs an rqat tool, its output into log_path; raises with the log's last lines on failure."""
    with open(log_path, "a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    if r.returncode != 0:
        tail = open(log_path).read().strip().splitlines()[-3:]
        raise RuntimeError(f"{os.path.basename(cmd[0])} {cmd[1] if len(cmd) > 1 else ''} exited "
                           f"{r.returncode}: {' | '.join(tail)}")


def rqat_logits(args, model: str, rows: list, tag: str, dtype: str = ""):
    inp = os.path.join(args.work, f"{tag}-input.safetensors")
    out = os.path.join(args.work, f"{tag}-logits.safetensors")
    write_ids(inp, rows)
    run_tool([args.rqat, "logits", "--model", model, "--input", inp, "--out", out,
              "--device", args.device, "--dtype", dtype or args.rqat_dtype, "--threads", str(args.threads)],
             os.path.join(args.work, "rqat.log"), args.rqat_timeout)
    logits = read_logits(out)
    os.remove(out)
    return logits


def rqat_greedy(args, model: str, prompts: list) -> list:
    """rqat's greedy continuations by repeated full forwards: after pass k the first k tokens are
    final; stops when a pass changes nothing (at most --new-tokens + 1 passes)."""
    p, n = len(prompts[0]), args.new_tokens
    cont = [[0] * n for _ in prompts]
    for k in range(n + 1):
        logits = rqat_logits(args, model, [a + c for a, c in zip(prompts, cont)], "peer",
                             args.peer_dtype)
        new = logits[:, p - 1:p - 1 + n].argmax(-1).tolist()
        if new == cont:
            log(f"dry run: rqat's greedy tokens of {model} after {k + 1} passes")
            return cont
        cont = new
    raise RuntimeError("rqat's greedy decoding did not settle")


# --- vLLM, in a child process (this file with --vllm-child)
def vllm_child(args) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # The engine in this process (no engine-core process to start, and one process to end).
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm
    from vllm import LLM, SamplingParams
    with open(args.vllm_child) as f:
        job = json.load(f)
    t0 = time.time()
    kwargs = dict(model=job["ckpt"], dtype=job["dtype"], enforce_eager=True, skip_tokenizer_init=True,
                  max_model_len=job["max_model_len"], max_num_seqs=max(len(job["prompts"]), 1),
                  gpu_memory_utilization=job["gpu_memory_utilization"], seed=0)
    try:  # no torch.compile either (enforce_eager alone only drops CUDA graphs in some versions)
        llm = LLM(compilation_config=0, **kwargs)
    except TypeError as e:  # a vLLM before compilation_config
        print(f"vllm_greedy_check: LLM(compilation_config=0) refused ({e}): without it", flush=True)
        llm = LLM(**kwargs)
    t_load = time.time() - t0
    n = job["new_tokens"]
    params = SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n, ignore_eos=True,
                            logprobs=5, detokenize=False)
    try:  # vLLM >= 0.5: prompts as TokensPrompt dicts
        outs = llm.generate([{"prompt_token_ids": p} for p in job["prompts"]], params, use_tqdm=False)
    except TypeError:  # older vLLM
        outs = llm.generate(prompt_token_ids=job["prompts"], sampling_params=params, use_tqdm=False)
    tokens, logprobs = [], []
    for o in outs:
        c = o.outputs[0]
        tokens.append([int(t) for t in c.token_ids])
        rows = []
        try:
            for d in c.logprobs or []:
                rows.append({str(int(t)): float(getattr(v, "logprob", v)) for t, v in d.items()})
        except Exception as e:  # a logprobs layout this script does not know: tokens still count
            print(f"vllm_greedy_check: vLLM's logprobs not read: {e}", file=sys.stderr)
            rows = []
        logprobs.append(rows)
    quant = getattr(getattr(llm.llm_engine, "model_config", None), "quantization", None)
    result = {"tokens": tokens, "logprobs": logprobs, "vllm_version": vllm.__version__,
              "dtype": job["dtype"], "quantization": quant, "load_s": round(t_load, 1),
              "generate_s": round(time.time() - t0 - t_load, 2)}
    tmp = job["out"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, job["out"])
    print(f"vllm_greedy_check: vLLM {vllm.__version__} served {job['ckpt']} ({quant}, {job['dtype']}):"
          f" loaded in {t_load:.1f} s", flush=True)
    del llm
    return 0


def vllm_tokens(args, cfg: dict, prompts: list) -> dict:
    dtype = args.vllm_dtype
    if dtype == "auto":
        dtype = cfg.get("torch_dtype") if cfg.get("torch_dtype") in ("bfloat16", "float16") else "bfloat16"
    out = os.path.join(args.work, "vllm-tokens.json")
    if os.path.exists(out):
        os.remove(out)
    job = {"ckpt": os.path.abspath(args.ckpt), "dtype": dtype, "prompts": prompts,
           "new_tokens": args.new_tokens, "max_model_len": args.max_model_len,
           "gpu_memory_utilization": args.gpu_memory_utilization, "out": out}
    job_path = os.path.join(args.work, "vllm-job.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    log_path = os.path.join(args.work, "vllm.log")
    log(f"vLLM serves {args.ckpt} ({dtype}); its log: {log_path}")
    with open(log_path, "w") as lf:
        # Its own session: the child and the engine processes vLLM starts are ended together.
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--vllm-child", job_path],
                                 stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
        CHILDREN.append(child.pid)
        deadline = time.time() + args.vllm_timeout
        done_at = None
        while child.poll() is None and time.time() < deadline:
            if done_at is None and os.path.exists(out):
                done_at = time.time()
            if done_at is not None and time.time() - done_at > 30:
                log("vLLM wrote its tokens but did not exit within 30 s: ended")
                break
            time.sleep(0.5)
        if child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGTERM)
                child.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.wait()
    if not os.path.exists(out):
        lines = [ln for ln in open(log_path, errors="replace").read().splitlines() if ln.strip()]
        errs = [ln for ln in lines if "Error" in ln or "error" in ln]
        why = (errs or lines or ["no output"])[-1].strip()[:300]
        late = time.time() >= deadline
        raise RuntimeError(f"vLLM {'ran past ' + str(args.vllm_timeout) + ' s' if late else 'failed'}"
                           f" (exit {child.returncode}): {why}")
    with open(out) as f:
        served = json.load(f)
    # vLLM's own words on the kernels it chose for the quantized layers (its INFO lines).
    said = []
    for ln in open(log_path, errors="replace"):
        if re.search(r"Marlin|Machete|Cutlass|CUTLASS|FlashInfer|[Kk]ernel for|Using .*[Kk]ernel", ln):
            msg = re.sub(r"^.*?\] ", "", ln.strip())[:200]
            if msg not in said:
                said.append(msg)
    served["kernel_lines"] = said[:6]
    return served


# --- The comparison
def compare(args, prompts: list, served: list, served_lps: list, logits) -> dict:
    import torch
    p, n = len(prompts[0]), args.new_tokens
    per_prompt, lp_errors = [], []
    total = identical = agree = 0
    for b, toks in enumerate(served):
        rows = logits[b, p - 1:p - 1 + n].double()
        top = rows.argmax(-1)
        mx = rows.max(-1).values
        sd = rows.std(-1)
        lsm = torch.log_softmax(rows, -1)
        first, div = None, []
        same_b = agree_b = 0
        for i, v in enumerate(toks):
            r = int(top[i])
            gap = float(mx[i] - rows[i, v])
            tol = args.tol * float(sd[i])
            same = r == v
            ok = same or gap <= tol
            same_b += same
            agree_b += ok
            lps = served_lps[b][i] if b < len(served_lps) and i < len(served_lps[b]) else None
            if lps:
                lp_errors.append(max(abs(lp - float(lsm[i, int(t)])) for t, lp in lps.items()))
            if not same:
                margin = None
                if lps and str(r) in lps and str(v) in lps:
                    margin = lps[str(v)] - lps[str(r)]
                div.append({"pos": i, "served": v, "rqat": r, "rqat_gap": round(gap, 4),
                            "rqat_gap_sd": round(gap / float(sd[i]), 3) if float(sd[i]) > 0 else None,
                            "served_margin": None if margin is None else round(margin, 4),
                            "agree": ok})
                if first is None:
                    first = i
        total += len(toks)
        identical += same_b
        agree += agree_b
        per_prompt.append({"prompt": b, "tokens": len(toks), "identical": same_b, "agree": agree_b,
                           "first_divergence": first, "divergences": div[:8]})
    lp_errors.sort()
    return {"tokens": total, "identical": identical, "agree": agree,
            "identical_fraction": identical / total if total else 0.0,
            "agree_fraction": agree / total if total else 0.0,
            "passed": bool(total) and agree / total >= args.min_agree,
            "logprob_error_median": lp_errors[len(lp_errors) // 2] if lp_errors else None,
            "logprob_error_max": lp_errors[-1] if lp_errors else None,
            "per_prompt": per_prompt}


def markdown(args, res: dict, info: dict) -> str:
    c = res["comparison"]
    lines = [f"#### {args.scheme}: {c['tokens']} tokens compared, "
             f"{100 * c['identical_fraction']:.1f}% identical, {100 * c['agree_fraction']:.1f}% agree "
             f"-> **{'pass' if c['passed'] else 'FAIL'}**", "",
             f"Served by {info['served_by']}; rqat: `rqat logits` of {res['rqat_model']} "
             f"({args.device}, {args.rqat_dtype}). {len(c['per_prompt'])} prompts of "
             f"{args.prompt_len} random ids (seed {args.seed}), {args.new_tokens} new tokens, greedy, "
             f"EOS ignored. Agree: vLLM's token is rqat's argmax or within {args.tol} sd of rqat's "
             f"logits below its max; pass: >= {100 * args.min_agree:.0f}% agree."]
    if c["logprob_error_max"] is not None:
        lines[-1] += (f" vLLM's top-5 logprobs against rqat's: median largest difference "
                      f"{c['logprob_error_median']:.4f}, max {c['logprob_error_max']:.4f}.")
    if info.get("kernel_lines"):
        lines += ["", "vLLM's log on its kernels: " + "; ".join(f"`{k}`" for k in info["kernel_lines"])]
    lines += ["", "| prompt | tokens | identical | agree | first divergence | at it: served / rqat token, "
              "rqat gap (sd), vLLM margin |", "| --- | --- | --- | --- | --- | --- |"]
    for pp in c["per_prompt"]:
        d = pp["divergences"][0] if pp["divergences"] else None
        at = "" if d is None else (f"{d['served']} / {d['rqat']}, {d['rqat_gap']:.4f} "
                                   f"({d['rqat_gap_sd']}), "
                                   f"{'-' if d['served_margin'] is None else d['served_margin']}")
        lines.append(f"| {pp['prompt']} | {pp['tokens']} | {pp['identical']} | {pp['agree']} | "
                     f"{'none' if pp['first_divergence'] is None else pp['first_divergence']} | {at} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", help="the compressed-tensors checkpoint directory vLLM serves")
    ap.add_argument("--work", help="working directory (result.json, section.md, logs)")
    ap.add_argument("--scheme", default="", help="its name in the report (default: the format)")
    ap.add_argument("--rqat", default=os.path.join(ROOT, "build", "apps", "rqat"))
    ap.add_argument("--rqat-model", default="", help="rqat's input (default: --ckpt imported "
                    "with rqat convert into WORK/rqat-import)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rqat-dtype", default="bf16", choices=["bf16", "f32", "auto"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=0.2)
    ap.add_argument("--min-agree", type=float, default=0.95)
    ap.add_argument("--vllm-dtype", default="auto", choices=["auto", "bfloat16", "float16"])
    ap.add_argument("--max-model-len", type=int, default=256)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument("--vllm-timeout", type=float, default=300)
    ap.add_argument("--rqat-timeout", type=float, default=300)
    ap.add_argument("--dry-run", action="store_true",
                    help="no vLLM: rqat's greedy decoding of --peer-model stands in for it")
    ap.add_argument("--peer-model", default="", help="with --dry-run (default: rqat's input)")
    ap.add_argument("--peer-dtype", default="", choices=["", "bf16", "f32", "auto"],
                    help="with --dry-run (default: --rqat-dtype)")
    ap.add_argument("--vllm-child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.vllm_child:
        return vllm_child(args)
    signal.signal(signal.SIGTERM, end_children)
    signal.signal(signal.SIGINT, end_children)
    if not args.ckpt or not args.work:
        ap.error("--ckpt and --work are required")
    for name in ("prompts", "prompt_len", "new_tokens"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    if args.prompt_len + args.new_tokens > args.max_model_len:
        ap.error("--prompt-len + --new-tokens exceed --max-model-len")
    os.makedirs(args.work, exist_ok=True)
    args.work = os.path.abspath(args.work)
    open(os.path.join(args.work, "rqat.log"), "w").close()
    cfg = read_config(args.ckpt)
    qc = cfg.get("quantization_config") or {}
    args.scheme = args.scheme or qc.get("format") or "unquantized"
    section = os.path.join(args.work, "section.md")

    def fail(msg: str, status: int = 2) -> int:
        log(msg)
        with open(section, "w") as f:
            f.write(f"#### {args.scheme}: not compared\n\n{msg}\n")
        print(f"RESULT serve_scheme={args.scheme} serve_pass=0 serve_error=1")
        return status

    if not args.dry_run:
        r = subprocess.run([sys.executable, "-c", "import vllm; print(vllm.__version__)"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            why = (r.stderr.strip().splitlines() or ["import failed"])[-1]
            return fail(f"vLLM is not importable in {sys.executable}: {why}", 3)

    prompts = make_prompts(args.prompts, args.prompt_len, int(cfg["vocab_size"]), args.seed)
    with open(os.path.join(args.work, "prompts.json"), "w") as f:
        json.dump({"prompts": prompts}, f)
    t0 = time.time()
    try:
        model = args.rqat_model
        if not model:
            model = os.path.join(args.work, "rqat-import")
            run_tool([args.rqat, "convert", "--model", args.ckpt, "--out", model],
                     os.path.join(args.work, "rqat.log"), args.rqat_timeout)
        if args.dry_run:
            peer = args.peer_model or model
            served = {"tokens": rqat_greedy(args, peer, prompts), "logprobs": []}
            info = {"served_by": f"DRY RUN: rqat's own greedy decoding of {peer} ({args.device}, "
                                 f"{args.peer_dtype or args.rqat_dtype}) standing in for vLLM"}
        else:
            served = vllm_tokens(args, cfg, prompts)
            info = {"served_by": f"vLLM {served['vllm_version']} (quantization "
                                 f"{served.get('quantization')}, dtype {served['dtype']}, eager; "
                                 f"loaded in {served.get('load_s')} s)",
                    "kernel_lines": served.get("kernel_lines", [])}
        if [len(t) for t in served["tokens"]] != [args.new_tokens] * len(prompts):
            return fail(f"the server returned {[len(t) for t in served['tokens']]} tokens, expected "
                        f"{args.new_tokens} per prompt")
        logits = rqat_logits(args, model, [a + t for a, t in zip(prompts, served["tokens"])], "rqat")
    except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
        return fail(str(e))
    comparison = compare(args, prompts, served["tokens"], served.get("logprobs") or [], logits)
    res = {"scheme": args.scheme, "ckpt": os.path.abspath(args.ckpt), "rqat_model": model,
           "dry_run": args.dry_run, "served_by": info["served_by"], "prompts": prompts,
           "served_tokens": served["tokens"], "seconds": round(time.time() - t0, 1),
           "vllm_kernel_lines": info.get("kernel_lines", []),
           "rule": {"tol_sd": args.tol, "min_agree": args.min_agree}, "comparison": comparison}
    with open(os.path.join(args.work, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(section, "w") as f:
        f.write(markdown(args, res, info))
    c = comparison
    firsts = ",".join("-" if p["first_divergence"] is None else str(p["first_divergence"])
                      for p in c["per_prompt"])
    lp = "" if c["logprob_error_max"] is None else f" serve_logprob_error_max={c['logprob_error_max']:.4f}"
    print(f"{args.scheme}: {c['tokens']} tokens, {100 * c['identical_fraction']:.1f}% identical, "
          f"{100 * c['agree_fraction']:.1f}% agree, first divergences {firsts}: "
          f"{'pass' if c['passed'] else 'FAIL'} ({info['served_by']})")
    print(f"RESULT serve_scheme={args.scheme} serve_tokens={c['tokens']} "
          f"serve_identical={c['identical_fraction']:.4f} serve_agree={c['agree_fraction']:.4f} "
          f"serve_first_divergence={firsts} serve_pass={int(c['passed'])}{lp} "
          f"serve_dry_run={int(args.dry_run)}")
    return 0 if c["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
