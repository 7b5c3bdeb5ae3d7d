#!/usr/bin/env python3
"""Writes the reference data of tests/test_tokenizer_parity.cpp: tokenizer.json files and the ids,
and decoded strings, that Hugging Face `tokenizers` / transformers produce for a set of texts.

Layout of --out:
  texts.jsonl             one JSON string per line: the texts every tokenizer encodes
  <name>/tokenizer.json   (+ tokenizer_config.json) for every tokenizer
  <name>.expected.jsonl   per text: ids, ids_special (add_special_tokens), decoded (ids decoded),
                          decoded_skip (ids_special decoded with skip_special_tokens)
  manifest.json           {"tokenizers": [{"name", "dir", "legacy_dir"?}], "skipped": [...], "data_dir"}

Real tokenizers (Qwen2.5, GPT-2) come from the legacy vocab.json + merges.txt under --data; the tiny
ones are trained here with `tokenizers` to cover the features the real ones do not use. Without
--data (or when it lacks the files) only the tiny tokenizers and the built-in texts are written.
"""
import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Texts chosen to hit the hard cases: scripts without spaces, emoji sequences, combining marks (NFC),
# every kind of Unicode space, whitespace runs before words and line ends, contractions in any case,
# digit runs, special-token strings glued to text, and code.
OWN_TEXTS = [
    "",
    " ",
    "   ",
    "\n",
    "\n\n\n",
    "\t",
    "Hello world",
    " Hello  world   ",
    "Hello\nworld\r\n\r\nagain\n",
    "你好，世界！今天天气很好。我们来解一道数学题：x² + 2x + 1 = 0。",
    "日本語のテキストとカタカナ、ひらがな。한국어 문장도 있습니다.",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇯🇵🇫🇷 ❤️ ✨🚀 and 🧑‍💻 coding",
    "Combining: e\u0301 vs \u00e9, A\u030a vs \u00c5, Hangul \u1100\u1161\u11a8 vs @HANGUL@",
    "Spaces: a\u00a0b a\u3000b a\u2009b a\u180eb a\u200bb x\u0085y p\u2028q r\u2029s \u202f\u205f end",
    "Controls: \x0b\x0c\x1c\x1d\x1e\x1f\x7f done",
    "I'm sure you'll see it's 'S and 'LL and 'Ve, 'ſ too; don't WON'T they'D",
    "Numbers 1234567890 3.14159 1,000,000 -42 1e-10 0x1F 007",
    "def f(x):\n\treturn x ** 2  # square\n\n\nclass A:\n    def __init__(self):\n        self.y = {'a': [1, 2, 3]}\n",
    "if (a && b) { return a->c[i] << 2; }   // C++\n\t\t\tint main() {}\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text<|endoftext|><|endoftext|> spaced <|endoftext|> ",
    "<|im_start|<|im_end|><|im_end|>> partial <|endoftext broken |>",
    "<|begin_of_text|>Llama style<|eot_id|> and <s> roberta </s> and <tool>  x  <tool> [MASK] a[MASK]b",
    "<think>\nLet me think step by step.\n</think>\n\nThe answer is \\boxed{42}.",
    "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$ and \\(\\sqrt{2}\\approx 1.414\\)",
    "Arabic: مرحبا بالعالم. Hindi: नमस्ते दुनिया। Thai: สวัสดีชาวโลก Hebrew: שלום",
    "Ligatures and compat: ﬁ ﬂ ① ² ㎏ Ｆｕｌｌｗｉｄｔｈ ＡＢＣ",
    "café cafe\u0301 CAFÉ naïve façade",
    "trailing spaces    \n    leading spaces\n  \n\t \n",
    "a" * 300 + " " + "ab" * 200 + " " + "🙂" * 50,
    " " * 40 + "x" + "\n" * 10 + "y" + "\t" * 7,
    "mixed\u00a0\u00a0spaces\u3000\u3000and words",
    "\U0001F600\U0001F601 astral \U00020000\U0002A6D6 CJK ext",
]


def own_texts():
    texts = []
    for t in OWN_TEXTS:
        texts.append(t.replace("@HANGUL@", "\u1112\u1161\u11ab"))  # a decomposed Hangul syllable
    return texts


def data_texts(data_dir):
    """MATH-500 problems and solutions, GSM8K questions and answers: raw strings, one per field."""
    texts = []
    for rel, fields in (("math500/test.jsonl", ("problem", "solution")), ("gsm8k/test.jsonl", ("question", "answer"))):
        path = data_dir / rel
        if not path.exists():
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    record = json.loads(line)
                    texts.extend(record[k] for k in fields if isinstance(record.get(k), str))
    return texts


def training_text(data_dir, texts):
    lines = list(texts)
    train = data_dir / "gsm8k/train.jsonl" if data_dir else None
    if train and train.exists():
        with open(train, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= 2000:
                    break
                record = json.loads(line)
                lines.append(record["question"] + "\n" + record["answer"])
    return lines


def byte_level_trainer(vocab_size, specials):
    return trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def tiny_llama3(corpus):
    """Llama-3 layout: Split(llama3 regex) + ByteLevel without regex, ignore_merges, BOS template."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, byte_level_trainer(700, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def tiny_nfc_added(corpus):
    """Qwen-like (NFC in a Sequence, qwen2 regex) with added tokens using every flag."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.NFC()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, byte_level_trainer(500, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]))
    tok.add_special_tokens([
        AddedToken("<tool>", lstrip=True, rstrip=True, special=True, normalized=False),
        AddedToken("[MASK]", single_word=True, special=True, normalized=False),
        AddedToken("<|im_start|>system", special=True, normalized=False),  # longer than <|im_start|>
    ])
    tok.add_tokens([
        AddedToken("<think>", special=False, normalized=False),
        AddedToken("</think>", special=False, normalized=False, rstrip=True),
        AddedToken("café", special=False, normalized=True),  # matches "cafe\u0301" after NFC
        AddedToken("step by step", special=False, normalized=True, lstrip=True),
    ])
    return tok


def tiny_gpt2_prefix(corpus):
    """GPT-2 regex with add_prefix_space, NFKC, Split behaviors, Roberta post-processor."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d"), behavior="merged_with_next", invert=False),
        pre_tokenizers.Split("\n", behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"[.,;:!?]"), behavior="merged_with_previous", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, byte_level_trainer(400, ["<s>", "</s>"]))
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    return tok


def tiny_split_removed(corpus):
    """Split with Removed and inverted Isolated patterns, no normalizer, string-form merges."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[ \t]+"), behavior="removed", invert=False),
        pre_tokenizers.Split(Regex(r"\p{L}+|\p{N}+"), behavior="isolated", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, byte_level_trainer(350, ["<|endoftext|>"]))
    return tok


def expected_lines(tok, texts):
    plain = tok.encode_batch(texts, add_special_tokens=False)
    special = tok.encode_batch(texts, add_special_tokens=True)
    ids = [e.ids for e in plain]
    ids_special = [e.ids for e in special]
    decoded = tok.decode_batch(ids, skip_special_tokens=False)
    decoded_skip = tok.decode_batch(ids_special, skip_special_tokens=True)
    for a, b, c, d in zip(ids, ids_special, decoded, decoded_skip):
        yield json.dumps({"ids": a, "ids_special": b, "decoded": c, "decoded_skip": d}, ensure_ascii=False)


def check_transformers_agrees(legacy_dir, loader, tok, texts, name):
    """The tokenizer.json written here must tokenize as transformers does on the legacy files."""
    hf = loader(legacy_dir)
    for add in (False, True):
        got = hf(texts, add_special_tokens=add)["input_ids"]
        want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=add)]
        if got != want:
            bad = next(i for i in range(len(texts)) if got[i] != want[i])
            sys.exit(f"{name}: transformers on {legacy_dir} differs from its saved tokenizer.json at text {bad}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--data", type=Path, default=None, help="shared data dir (tokenizers/, math500/, gsm8k/)")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = args.data.resolve() if args.data and args.data.exists() else None

    texts = own_texts() + (data_texts(data) if data else [])
    with open(out / "texts.jsonl", "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")

    manifest = {"tokenizers": [], "skipped": [], "data_dir": str(data) if data else ""}

    def emit(name, tok, legacy_dir=None):
        d = out / name
        d.mkdir(exist_ok=True)
        if not (d / "tokenizer.json").exists() or legacy_dir is None:
            tok.save(str(d / "tokenizer.json"))
        with open(out / f"{name}.expected.jsonl", "w", encoding="utf-8") as f:
            for line in expected_lines(tok, texts):
                f.write(line + "\n")
        entry = {"name": name, "dir": str(d)}
        if legacy_dir:
            entry["legacy_dir"] = str(legacy_dir)
        manifest["tokenizers"].append(entry)

    # Real tokenizers, from the legacy files exactly as transformers loads them.
    real = {"qwen2.5": "AutoTokenizer", "gpt2": "GPT2Tokenizer"}
    for name, cls in real.items():
        legacy = data / "tokenizers" / name if data else None
        if legacy is None or not (legacy / "vocab.json").exists() or not (legacy / "merges.txt").exists():
            manifest["skipped"].append(name)
            continue
        import transformers  # only needed here

        loader = getattr(transformers, cls).from_pretrained
        hf = loader(str(legacy))
        hf.save_pretrained(str(out / name))
        tok = Tokenizer.from_file(str(out / name / "tokenizer.json"))
        check_transformers_agrees(str(legacy), loader, tok, texts[: min(len(texts), 400)], name)
        emit(name, tok, legacy)

    corpus = training_text(data, texts)
    emit("tiny_llama3", tiny_llama3(corpus))
    emit("tiny_nfc_added", tiny_nfc_added(corpus))
    emit("tiny_gpt2_prefix", tiny_gpt2_prefix(corpus))
    emit("tiny_split_removed", tiny_split_removed(corpus))
    # The tiny Llama-3 also gets a tokenizer_config.json without add_bos_token: the template stays.
    with open(out / "tiny_llama3" / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                   "eos_token": "<|end_of_text|>"}, f)

    with open(out / "manifest.json", "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {len(texts)} texts x {len(manifest['tokenizers'])} tokenizers to {out}"
          + (f"; skipped (no data): {', '.join(manifest['skipped'])}" if manifest["skipped"] else ""))


if __name__ == "__main__":
    main()
