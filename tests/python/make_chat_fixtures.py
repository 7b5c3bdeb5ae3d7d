"""Reference renderings for rqat's chat templates, made with transformers' apply_chat_template.
Writes DIR/<case>/tokenizer_config.json (template + special tokens) and DIR/cases.json (conversations,
options and the expected text) for tests/test_chat_parity.cpp. The Qwen2.5 case uses the real
tokenizer_config.json of ../shared/data (skipped when absent); the other families use Jinja templates
written here to the published formats, since their files are not available offline.
Usage: make_chat_fixtures.py --out DIR [--data ../shared/data]
"""

import argparse
import json
import os
import pathlib

from tokenizers import Tokenizer, models
from transformers import AutoTokenizer, PreTrainedTokenizerFast

# --- Templates written for these tests, one per family format (system/user/assistant only).
QWEN3 = """{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1, found=false) %}
{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}
{%- if not ns.found and message.role == 'user' %}{%- set ns.found = true %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}
{%- for message in messages %}{%- set content = message.content %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}{%- set reasoning_content = '' %}
{%- if '</think>' in content %}{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}
{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}{{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"""

DEEPSEEK_R1 = """{%- set ns = namespace(system_prompt='', first=true) %}{%- for message in messages %}{%- if message['role'] == 'system' %}
{%- if ns.first %}{%- set ns.system_prompt = message['content'] %}{%- set ns.first = false %}{%- else %}{%- set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}
{{- bos_token }}{{- ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == 'user' %}{{- '<｜User｜>' + message['content'] }}{%- endif %}
{%- if message['role'] == 'assistant' %}{%- set content = message['content'] %}{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] %}{%- endif %}{{- '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}{%- endif %}{%- endfor %}
{%- if add_generation_prompt %}{{- '<｜Assistant｜><think>\\n' }}{%- endif %}"""

DEEPSEEK_R1_NO_THINK = DEEPSEEK_R1.replace("'<｜Assistant｜><think>\\n'", "'<｜Assistant｜>'")

LLAMA3 = """{%- for message in messages %}{%- set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}
{%- if loop.index0 == 0 %}{%- set content = bos_token + content %}{%- endif %}{{- content }}{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"""

LLAMA31 = """{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] | trim %}{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Cutting Knowledge Date: December 2023\\n' }}{{- 'Today Date: ' + date_string + '\\n\\n' }}{{- system_message }}{{- '<|eot_id|>' }}
{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"""

CHATML_PLAIN = """{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"""

MATH_SYSTEM = "Please reason step by step, and put your final answer within \\\\boxed{}."

# --- Conversations: every role order the tools produce, plus awkward content.
CONVERSATIONS = [
    [{"role": "user", "content": "What is 1+1?"}],
    [{"role": "system", "content": "You are a careful mathematician."}, {"role": "user", "content": "Solve x^2=4."}],
    [
        {"role": "user", "content": "  Padded question with spaces \n"},
        {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nThe answer is \\boxed{2}."},
        {"role": "user", "content": "And 2+2?"},
    ],
    [
        {"role": "system", "content": "sys A"},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "plain answer"},
        {"role": "user", "content": "Q2 with 中文 and emoji 🚀"},
        {"role": "assistant", "content": "<think>reasoning\n\n</think>final"},
    ],
    [{"role": "user", "content": "multi\nline\n\nquestion\t with tab"}, {"role": "assistant", "content": "\n\nanswer"}],
]


def tiny_tokenizer(bos, eos):
    """A word-level stand-in: apply_chat_template needs a tokenizer object, not a vocabulary."""
    vocab = {"[UNK]": 0, bos: 1, eos: 2}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, unk_token="[UNK]")


def render_all(tokenizer, template, extra_kwargs):
    cases = []
    for conversation in CONVERSATIONS:
        for add_generation_prompt in (True, False):
            if not add_generation_prompt and conversation[-1]["role"] != "assistant":
                continue  # a conversation ending with a user turn is only rendered to be answered
            for enable_thinking in (True, False):
                text = tokenizer.apply_chat_template(
                    conversation, chat_template=template, tokenize=False,
                    add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking, **extra_kwargs)
                cases.append({"messages": conversation, "add_generation_prompt": add_generation_prompt,
                              "enable_thinking": enable_thinking, "expected": text})
    return cases


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--data", default=str(pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data"))
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    families = {}  # case -> (tokenizer_config dict, tokenizer, expected format)
    qwen_dir = pathlib.Path(args.data) / "tokenizers" / "qwen2.5"
    if (qwen_dir / "tokenizer_config.json").exists():
        real = json.loads((qwen_dir / "tokenizer_config.json").read_text())
        tok = AutoTokenizer.from_pretrained(str(qwen_dir))
        families["qwen2.5"] = ({"chat_template": real["chat_template"], "eos_token": real["eos_token"]}, tok, "chatml")
        math = real["chat_template"].replace("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", MATH_SYSTEM)
        assert math != real["chat_template"]
        families["qwen2.5-math"] = ({"chat_template": math, "eos_token": real["eos_token"]}, tok, "chatml")
    else:
        print(f"SKIPPED qwen2.5: {qwen_dir} not found")
    specs = {
        "chatml-plain": (CHATML_PLAIN, "<|endoftext|>", "<|im_end|>", "chatml"),
        "qwen3": (QWEN3, "<|endoftext|>", "<|im_end|>", "qwen3"),
        "deepseek-r1": (DEEPSEEK_R1, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "deepseek-r1"),
        "deepseek-r1-no-think": (DEEPSEEK_R1_NO_THINK, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "deepseek-r1"),
        "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>", "llama3"),
        "llama3.1": (LLAMA31, "<|begin_of_text|>", "<|eot_id|>", "llama3.1"),
    }
    for name, (template, bos, eos, fmt) in specs.items():
        # DeepSeek writes special tokens as objects: the loader must accept both spellings.
        bos_entry = {"content": bos, "lstrip": False} if name.startswith("deepseek") else bos
        families[name] = ({"chat_template": template, "bos_token": bos_entry, "eos_token": eos}, tiny_tokenizer(bos, eos), fmt)

    index = []
    for name, (config, tok, fmt) in families.items():
        case_dir = out / name
        case_dir.mkdir(exist_ok=True)
        (case_dir / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1))
        cases = render_all(tok, config["chat_template"], {})
        index.append({"name": name, "format": fmt, "cases": cases})
        print(f"{name}: {len(cases)} renderings ({fmt})")
    (out / "cases.json").write_text(json.dumps(index, ensure_ascii=False, indent=1))
    (out / ".complete").write_text("ok\n")


if __name__ == "__main__":
    main()
