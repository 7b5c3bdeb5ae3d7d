"""The work of scripts/bench_gguf_kl (see its header): make the GGUF files, run them in llama.cpp, print the table."""

import argparse
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def quiet_stderr():
    """llama.cpp's C code warns on fd 2 (its context is padded past the tiny model's 192 positions)."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def main():
    parser = argparse.ArgumentParser(prog="bench_gguf_kl")
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--model", default=str(ROOT / "experiments" / "tiny" / "teacher_256"))
    parser.add_argument("--types", default="q2_k q3_k q4_k q4_0")
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--calib-samples", type=int, default=128)
    parser.add_argument("--keep", default="")
    args = parser.parse_args()
    from llama_cpp_peer import import_llama_cpp
    llama_cpp = import_llama_cpp()
    if llama_cpp is None:
        sys.exit("bench_gguf_kl: error: llama-cpp-python is not installed (RQAT_PEERS=1 scripts/setup, or scripts/test, builds it)")
    bin_dir, model = pathlib.Path(args.bin_dir), pathlib.Path(args.model)
    if not (model / "config.json").exists():
        sys.exit(f"bench_gguf_kl: error: --model {model}: no config.json")
    work = pathlib.Path(args.keep) if args.keep else pathlib.Path(tempfile.mkdtemp(prefix="bench_gguf_kl."))
    work.mkdir(parents=True, exist_ok=True)

    def run(*cmd):
        result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"bench_gguf_kl: error: {' '.join(map(str, cmd))}\n{result.stderr}")
        return result

    task = work / "task"
    if not (task / "test.jsonl").exists():
        run(bin_dir / "rqat", "tiny-task", "--out", task, "--seed", "0", "--train", "20000", "--test", "300",
            "--levels", "6", "--max-start", "40", "--max-change", "19", "--max-value", "99")
    calib = ["--calib", task / "train.jsonl", "--calib-chat", "--calib-prompt-field", "problem",
             "--calib-response-field", "solution", "--calib-samples", args.calib_samples, "--calib-seq-len", "128"]
    full = work / "f32.gguf"
    run(bin_dir / "rqat", "convert", "--model", model, "--to", "gguf", "--gguf-type", "f32", "--out", full)
    files = {}
    for t in args.types.split():
        files[t, "reference"] = work / f"reference-{t}.gguf"
        run(bin_dir / "rqat", "convert", "--model", model, "--to", "gguf", "--gguf-type", t,
            "--gguf-embedding-type", "f32", "--out", files[t, "reference"])
        for method, extra in [("imatrix", ["--method", "rtn", "--imatrix"]), ("gptq", ["--method", "gptq"]),
                              ("gptq+imatrix", ["--method", "gptq", "--imatrix"])]:
            out = work / f"{method}-{t}"
            run(bin_dir / "ptq", "--model", model, "--out", out, "--grid", f"gguf-{t}", *extra, *calib,
                "--export", "gguf", "--gguf-embedding-type", "f32", "--device", "cpu")
            files[t, method] = out / f"model-{t}.gguf"

    docs = [json.loads(line) for line in (task / "test.jsonl").read_text().splitlines()[:args.docs]]
    texts = [f"<|im_start|>user\n{d['problem']}<|im_end|>\n<|im_start|>assistant\n{d['solution']}<|im_end|>\n"
             for d in docs]

    def log_probs(gguf_file):
        with quiet_stderr():
            llm = llama_cpp.Llama(model_path=str(gguf_file), n_ctx=192, n_threads=2, logits_all=True,
                                  verbose=False, type_k=0, type_v=0)
        out = []
        for text in texts:
            ids = llm.tokenize(text.encode(), add_bos=False, special=True)
            llm.reset()
            llm.eval(ids)
            logits = np.array(llm.scores[:len(ids)], dtype=np.float64)
            logits -= logits.max(axis=1, keepdims=True)
            out.append(logits - np.log(np.exp(logits).sum(axis=1, keepdims=True)))
        return np.concatenate(out)

    reference_lp = log_probs(full)
    p = np.exp(reference_lp)
    print(f"KL(full precision || quantized) per token, llama.cpp on both sides, {len(texts)} held-out documents "
          f"({reference_lp.shape[0]} tokens) of the tiny task; model {model}")
    print(f"{'type':<6} {'method':<13} {'KL':>9} {'/ reference':>12} {'top-1 agree':>12}")
    for t in args.types.split():
        base = None
        for method in ["reference", "imatrix", "gptq", "gptq+imatrix"]:
            lp = log_probs(files[t, method])
            kl = float((p * (reference_lp - lp)).sum(axis=1).mean())
            agree = float((lp.argmax(axis=1) == reference_lp.argmax(axis=1)).mean())
            base = kl if method == "reference" else base
            print(f"{t:<6} {method:<13} {kl:>9.5f} {kl / base:>11.2f}x {agree:>11.1%}")
    if not args.keep:
        print(f"(files in {work})")


if __name__ == "__main__":
    main()
