"""llama.cpp's side of scripts/bench_cpu_decode: prompt processing and batch-1 decode of a GGUF file through
llama-cpp-python (the library llama-cli runs), with a given number of threads.

Prompt processing: one llama_decode of P tokens (n_batch = P). Decode: after that prompt, N single-token
evaluations, each the next token of a fixed sequence (no sampling, as rqat's greedy decode spends ~nothing on it).
The best of --repeats runs of each is printed as RESULT lines.
"""

import argparse
import sys
import time

from llama_cpp_peer import import_llama_cpp

llama_cpp = import_llama_cpp()
if llama_cpp is None:
    sys.exit("bench_cpu_decode_llama: llama-cpp-python is not installed (RQAT_PEERS=1 scripts/setup, or "
             "scripts/test, installs it from scripts/requirements-peers.txt)")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="GGUF file")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=64, help="decoded tokens")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    n_ctx = args.prompt + args.new_tokens + 8
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=n_ctx, n_batch=max(args.prompt, 32), n_ubatch=max(args.prompt, 32),
                          n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    vocab = llm.n_vocab()
    prompt = [(7 * i + 3) % vocab for i in range(args.prompt)]
    tokens = [(11 * i + 5) % vocab for i in range(args.new_tokens)]
    llm.reset()
    llm.eval(prompt[:8])  # warm-up: weights paged in, thread pool started
    best_prefill = best_decode = 0.0
    for _ in range(args.repeats):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        for t in tokens:
            llm.eval([t])
        t2 = time.perf_counter()
        best_prefill = max(best_prefill, args.prompt / (t1 - t0))
        best_decode = max(best_decode, args.new_tokens / (t2 - t1))
    print(f"RESULT prefill_tokens_per_s={best_prefill:.3f} decode_tokens_per_s={best_decode:.3f}")


if __name__ == "__main__":
    main()
