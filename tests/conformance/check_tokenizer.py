#!/usr/bin/env python3
"""check_tokenizer.py — LIO's tokenizer against two independent oracles on a text corpus.

Part 1 (llama.cpp): for each corpus text, the oracle ids are
    llama_cpp.Llama(model, vocab_only=True).tokenize(text.encode(), add_bos=True, special=True)
(add_bos=True: BOS where the model asks for it, tokenizer.ggml.add_bos_token — Gemma yes,
SmolLM2 no) and LIO's are the {"ids": [...]} printed by
    LIO tokenize --model MODEL --prompt TEXT --json
(LIO parses special tokens and adds BOS by the model's default in `tokenize`). Both byte-level
BPE ("gpt2") and SentencePiece ("llama": Gemma 3) vocabularies.

Part 2 (Hugging Face tokenizers; byte-level BPE vocabularies only, skipped for SentencePiece,
where llama.cpp is the oracle): a `tokenizers.Tokenizer` is built in Python from the GGUF's
vocabulary and merges (BPE model; pre_tokenizer chosen from tokenizer.ggml.pre, e.g.
Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)] for "smollm"; ByteLevel
decoder; the control tokens added as special tokens) and saved as tokenizer.json in a temp
directory, next to a tokenizer_config.json. Its encode(text, add_special_tokens=False) ids
are compared with `LIO tokenize --model <that tokenizer.json> --json`. This checks LIO's
tokenizer.json loader and, independently of llama.cpp, the BPE itself.

Prints one PASS/FAIL line per text and oracle, with the first differing position on
failure, and exits 1 if any text mismatches (2 on a usage or setup error).

Requires: llama-cpp-python, tokenizers, gguf (pip). Example:
    python tests/conformance/check_tokenizer.py --lio build/bin/lio \
        --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --corpus tests/conformance/tokenizer_corpus.json
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

# tokenizer.ggml.pre -> the HF pre_tokenizer that splits the same way (llama.cpp llama-vocab.cpp).
DIGITS_THEN_GPT2 = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
GPT2_ONLY = {"gpt2", "gpt-2", "phi-2", "roberta-bpe", "mpt", "olmo"}
LLAMA3 = {"llama-bpe", "llama3", "llama-v3", "falcon3"}
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4


def load_corpus(path: Path) -> list[dict]:
    data = json.loads(path.read_text(encoding="utf-8"))
    texts = data["texts"] if isinstance(data, dict) else data
    for entry in texts:
        if "\x00" in entry["text"]:
            raise ValueError(f"{path}: text '{entry['name']}' contains NUL, which cannot be "
                             "passed on a command line")
    return texts


def run_lio(lio_cmd: list[str], model: str, text: str) -> list[int] | str:
    """Runs `LIO tokenize --model MODEL --prompt TEXT --json`; returns its ids, or an error
    message when it fails or prints no ids."""
    try:
        return _run_lio(lio_cmd, model, text)
    except (OSError, RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"


def _run_lio(lio_cmd: list[str], model: str, text: str) -> list[int]:
    argv = lio_cmd + ["tokenize", "--model", model, "--prompt", text, "--json"]
    proc = subprocess.run(argv, capture_output=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv[:4])} ... exited {proc.returncode}: "
                           f"{proc.stderr.decode(errors='replace').strip()}")
    out = proc.stdout.decode("utf-8", errors="replace").strip()
    # The JSON object is the last line that starts with '{' (tolerates log lines before it).
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return [int(i) for i in json.loads(line)["ids"]]
    raise RuntimeError(f"no JSON ids in LIO output: {out[:200]!r}")


def first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(oracle_name: str, entry: dict, expected: list[int], got: list[int] | str) -> bool:
    """Prints PASS/FAIL for one text; `got` is LIO's ids, or its error message."""
    name = entry["name"]
    if isinstance(got, str):
        print(f"FAIL [{oracle_name}] {name}: lio failed: {got}")
        return False
    if expected == got:
        print(f"PASS [{oracle_name}] {name} ({len(got)} tokens)")
        return True
    i = first_difference(expected, got)
    print(f"FAIL [{oracle_name}] {name}: first difference at position {i}: "
          f"{oracle_name} {expected[i:i + 8]} vs lio {got[i:i + 8]} "
          f"(lengths {len(expected)} vs {len(got)}); text {entry['text']!r:.120}")
    return False


def gguf_vocab(model_path: str) -> dict:
    """Reads the tokenizer.ggml.* metadata with gguf-py."""
    import gguf  # noqa: PLC0415 (imported lazily so --help works without it)

    reader = gguf.GGUFReader(model_path)

    def field(key, default=None):
        f = reader.fields.get(key)
        return default if f is None else f.contents()

    return {
        "model": field("tokenizer.ggml.model", "gpt2"),
        "pre": field("tokenizer.ggml.pre", "default"),
        "tokens": field("tokenizer.ggml.tokens"),
        "types": field("tokenizer.ggml.token_type"),
        "merges": field("tokenizer.ggml.merges"),
        "bos": field("tokenizer.ggml.bos_token_id"),
        "eos": field("tokenizer.ggml.eos_token_id"),
        "chat_template": field("tokenizer.chat_template"),
    }


def build_hf_tokenizer(vocab: dict, out_dir: Path):
    """Builds and saves (tokenizer.json + tokenizer_config.json) an HF byte-level BPE
    tokenizer equivalent to the GGUF vocabulary. Returns the tokenizers.Tokenizer."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    tokens = vocab["tokens"]
    merges = [tuple(m.split(" ", 1)) for m in vocab["merges"]]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges)
    tok = Tokenizer(bpe)
    pre = vocab["pre"]
    if pre in DIGITS_THEN_GPT2:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    elif pre in GPT2_ONLY:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pre in LLAMA3:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        raise ValueError(f"no HF pre_tokenizer mapping for tokenizer.ggml.pre '{pre}'")
    tok.decoder = decoders.ByteLevel()
    types = vocab["types"] or [1] * len(tokens)
    specials = [AddedToken(tokens[i], special=True, normalized=False)
                for i, t in enumerate(types) if t == TOKEN_TYPE_CONTROL]
    user = [AddedToken(tokens[i], special=False, normalized=False)
            for i, t in enumerate(types) if t == TOKEN_TYPE_USER_DEFINED]
    tok.add_special_tokens(specials)
    if user:
        tok.add_tokens(user)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    config = {"add_bos_token": False}
    if vocab["bos"] is not None:
        config["bos_token"] = tokens[vocab["bos"]]
    if vocab["eos"] is not None:
        config["eos_token"] = tokens[vocab["eos"]]
    if vocab["chat_template"]:
        config["chat_template"] = vocab["chat_template"]
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return tok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lio", required=True,
                        help="the lio binary (or a quoted command prefix, e.g. 'valgrind lio')")
    parser.add_argument("--model", required=True, help="GGUF model file")
    parser.add_argument("--corpus", required=True, type=Path, help="tokenizer_corpus.json")
    parser.add_argument("--skip-hf", action="store_true", help="only compare with llama.cpp")
    parser.add_argument("--skip-llama", action="store_true", help="only compare with HF")
    args = parser.parse_args()

    lio_cmd = shlex.split(args.lio)
    try:
        corpus = load_corpus(args.corpus)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: cannot read corpus: {e}", file=sys.stderr)
        return 2

    n_fail = 0
    n_checked = 0
    if not args.skip_llama:
        try:
            import llama_cpp
        except ImportError as e:
            print(f"error: llama_cpp (llama-cpp-python) is required: {e}", file=sys.stderr)
            return 2
        llama = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
        passed = 0
        for entry in corpus:
            expected = llama.tokenize(entry["text"].encode("utf-8"), add_bos=True, special=True)
            got = run_lio(lio_cmd, args.model, entry["text"])
            passed += compare("llama.cpp", entry, list(expected), got)
        print(f"llama.cpp: {passed}/{len(corpus)} texts match")
        n_fail += len(corpus) - passed
        n_checked += len(corpus)

    if not args.skip_hf and gguf_vocab(args.model).get("model") == "llama":
        print("hf tokenizers: skipped (a SentencePiece vocabulary: llama.cpp is its oracle)")
    elif not args.skip_hf:
        try:
            import tokenizers  # noqa: F401
        except ImportError as e:
            print(f"error: tokenizers is required: {e}", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="lio_tok_") as tmp:
            hf = build_hf_tokenizer(gguf_vocab(args.model), Path(tmp))
            tokenizer_json = str(Path(tmp) / "tokenizer.json")
            passed = 0
            for entry in corpus:
                expected = hf.encode(entry["text"], add_special_tokens=False).ids
                got = run_lio(lio_cmd, tokenizer_json, entry["text"])
                passed += compare("hf", entry, expected, got)
            print(f"hf tokenizers: {passed}/{len(corpus)} texts match")
            n_fail += len(corpus) - passed
            n_checked += len(corpus)

    print(f"{'OK' if n_fail == 0 else 'FAILED'}: {n_checked - n_fail}/{n_checked} comparisons match")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
