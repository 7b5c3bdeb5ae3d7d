"""scripts/vllm_greedy_check.py (gpu-check's `serve` step) run against a stand-in for vLLM, so that its plumbing and
its comparison are tested where no GPU and no vLLM are: a `vllm` package written into the test's directory (first
on PYTHONPATH) whose LLM serves the checkpoint with transformers and compressed-tensors (greedy, token ids in,
EOS ignored) -- an independent engine on the same compressed-tensors checkpoint -- or, told to, returns wrong
tokens. The checkpoint: tests/write_compressed_tensors_fixture's FP8 W8A8 export of a tiny random qwen3 (weights
and per-token activations quantized; transformers computes it in float32 as rqat does).
  (a) the stand-in serving the checkpoint: the script passes (exit 0), every token identical;
  (b) the stand-in returning other tokens: the script fails the rule (exit 1) and says so;
  (c) without any vllm on the path: exit 3, "not importable".
What the real vLLM API does on a GPU (its kernels, its logprobs) only a lent GPU shows: gpu-check --steps serve.
Needs RQAT_BIN (and the fixture program beside it), compressed-tensors and transformers; skips otherwise.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "vllm_greedy_check.py"
RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not os.access(RQAT_BIN, os.X_OK):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)
from ct_fixture import fixture_program  # noqa: E402

FIXTURE = fixture_program(RQAT_BIN)
pytest.importorskip("compressed_tensors", reason="the stand-in serves the checkpoint through compressed-tensors")
pytest.importorskip("transformers", reason="the stand-in serves the checkpoint with transformers")

STAND_IN = '''
"""A stand-in for vLLM's offline API (tests/python/test_vllm_greedy_check.py): transformers' greedy decoding."""
import os

import torch

__version__ = "0.0+stand-in"


class SamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class _Completion:
    def __init__(self, token_ids):
        self.token_ids = token_ids
        self.logprobs = None


class _Request:
    def __init__(self, token_ids):
        self.outputs = [_Completion(token_ids)]


class LLM:
    def __init__(self, model, **kwargs):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.llm_engine = type("Engine", (), {"model_config": type("Config", (), {"quantization": "stand-in"})()})()

    def generate(self, prompts, params, use_tqdm=False):
        requests = []
        for prompt in prompts:
            ids = list(prompt["prompt_token_ids"])
            new = []
            for _ in range(params.max_tokens):
                if os.environ.get("STAND_IN_WRONG"):
                    token = (len(new) * 37 + 11) % self.model.config.vocab_size
                else:
                    with torch.no_grad():
                        token = int(self.model(torch.tensor([ids + new])).logits[0, -1].argmax())
                new.append(token)
            requests.append(_Request(new))
        return requests
'''


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    result = subprocess.run([str(FIXTURE), str(root / "fixture"), "fp8-w8a8"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    stand_in = root / "stand-in" / "vllm"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text(STAND_IN)
    return root


def check(root, work, env_extra, with_stand_in=True):
    env = dict(os.environ, **env_extra)
    if with_stand_in:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root / "stand-in"), env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(SCRIPT), "--ckpt", str(root / "fixture" / "ct"), "--work", str(work),
                           "--scheme", "fp8-w8a8", "--rqat", RQAT_BIN, "--device", "cpu", "--rqat-dtype", "f32",
                           "--prompts", "2", "--prompt-len", "8", "--new-tokens", "8", "--vllm-timeout", "240"],
                          capture_output=True, text=True, timeout=600, env=env)


def test_stand_in_serving_the_checkpoint_agrees_token_for_token(checkpoint, tmp_path):
    result = check(checkpoint, tmp_path / "work", {})
    assert result.returncode == 0, result.stdout + result.stderr
    res = json.loads((tmp_path / "work" / "result.json").read_text())
    print(json.dumps({k: v for k, v in res.items() if not isinstance(v, (list, dict))}))
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT"))
    assert "serve_pass=1" in line and "serve_identical=1" in line, line


def test_stand_in_with_other_tokens_fails_the_rule(checkpoint, tmp_path):
    result = check(checkpoint, tmp_path / "work", {"STAND_IN_WRONG": "1"})
    assert result.returncode == 1, result.stdout + result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT"))
    assert "serve_pass=0" in line, line


def test_without_vllm_it_says_so(checkpoint, tmp_path):
    try:
        import vllm  # noqa: F401

        pytest.skip("a real vLLM is importable here")
    except ImportError:
        pass
    result = check(checkpoint, tmp_path / "work", {}, with_stand_in=False)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "not importable" in result.stdout + result.stderr
