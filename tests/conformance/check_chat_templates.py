#!/usr/bin/env python3
"""check_chat_templates.py - LIO's Jinja chat-template rendering against jinja2 (issue 65).

The oracle is Python's jinja2, the reference implementation of the language, as
llama-cpp-python's Jinja2ChatFormatter runs it (ImmutableSandboxedEnvironment, trim_blocks and
lstrip_blocks on, raise_exception raising, strftime_now the local time): the rendering
Hugging Face transformers' apply_chat_template gives too. LIO's side is
    LIO chat-template --template FILE --messages JSON [--no-generation-prompt]
                      --bos-token B --eos-token E --json
(and, with --model, the GGUF file's own template and tokens).

Templates: every file in tests/conformance/chat_templates/ (the instruct templates of the
families LIO loads: SmolLM2, Qwen2.5, Qwen3, Llama 3.2, Gemma 3; their sources are in its
README.md), the templates llama-cpp-python carries as constants (llama_chat_format.py's
*_CHAT_TEMPLATE strings), and each --model file's tokenizer.chat_template. Conversations: a
user turn alone, a system prompt, several turns, an assistant turn last, Unicode, each with and
without add_generation_prompt. A conversation the template itself rejects (jinja2 raises, e.g.
Gemma 3 on two user turns in a row) must make LIO fail too, with the template's message.

Prints one PASS/FAIL line per (template, conversation, add_generation_prompt) and exits 1 on
any mismatch, 2 on a setup error.
  .venv/bin/python tests/conformance/check_chat_templates.py --lio build/bin/lio \\
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CONVERSATIONS = {
    "user": [{"role": "user", "content": "What is 2+2?"}],
    "system+user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}],
    "multi-turn": [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Korea?"},
    ],
    "assistant-last": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}],
    "unicode": [{"role": "user", "content": "안녕하세요 — «ça va?» 🙂\n  indented line\n"}],
    "two-users": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
}

# Special-token texts for the templates given as files (what each family's vocabulary holds).
TOKENS = {
    "gemma3": ("<bos>", "<eos>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2": ("", "<|im_end|>"),
    "qwen3": ("", "<|im_end|>"),
    "smollm2": ("<|im_start|>", "<|im_end|>"),
}


def jinja2_render(template: str, messages, add_generation_prompt: bool, bos: str, eos: str):
    """(text, None) or (None, error message) from llama-cpp-python's Jinja2ChatFormatter."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    try:
        fmt = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos,
                                  add_generation_prompt=add_generation_prompt)
        return fmt(messages=messages).prompt, None
    except Exception as e:  # the template's own errors (raise_exception -> ValueError), jinja2's
        return None, f"{type(e).__name__}: {e}"


def lio_render(lio: str, messages, add_generation_prompt: bool, *, template: Path | None = None,
               model: str | None = None, bos: str = "", eos: str = ""):
    cmd = [lio, "chat-template", "--messages", json.dumps(messages), "--json"]
    if template is not None:
        cmd += ["--template", str(template)]
    if model is not None:
        cmd += ["--model", model]
    else:
        cmd += ["--bos-token", bos, "--eos-token", eos]
    if not add_generation_prompt:
        cmd.append("--no-generation-prompt")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode == 0:
        return json.loads(p.stdout)["text"], None
    return None, (p.stderr.strip() or f"exit {p.returncode}")


def first_difference(a: str, b: str) -> str:
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"first difference at byte {i}: LIO {a[i:i + 40]!r} vs jinja2 {b[i:i + 40]!r}"


def llama_cpp_python_templates():
    """The chat templates llama-cpp-python ships as string constants, by name."""
    from llama_cpp import llama_chat_format

    return {name: value for name, value in vars(llama_chat_format).items()
            if name.endswith("_CHAT_TEMPLATE") and isinstance(value, str) and "{%" in value}


def gguf_template(model: str):
    """(template, bos text, eos text) of a GGUF file, read with gguf-py (llama.cpp's reader)."""
    from gguf import GGUFReader

    r = GGUFReader(model)

    def field(key):
        f = r.fields.get(key)
        return None if f is None else f.parts[f.data[0]]

    tmpl = field("tokenizer.chat_template")
    if tmpl is None:
        return None
    tokens = r.fields["tokenizer.ggml.tokens"]

    def text(key):
        v = field(key)
        return "" if v is None else bytes(tokens.parts[tokens.data[int(v[0])]]).decode("utf-8")

    return bytes(tmpl).decode("utf-8"), text("tokenizer.ggml.bos_token_id"), text("tokenizer.ggml.eos_token_id")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lio", required=True)
    ap.add_argument("--model", action="append", default=[], help="a GGUF file whose own template is checked too")
    a = ap.parse_args()

    cases = []  # (label, template text, template path or None, model or None, bos, eos)
    for path in sorted((HERE / "chat_templates").glob("*.jinja")):
        bos, eos = TOKENS.get(path.stem, ("<s>", "</s>"))
        cases.append((path.name, path.read_text(encoding="utf-8"), path, None, bos, eos))
    with tempfile.TemporaryDirectory() as d:
        for name, text in sorted(llama_cpp_python_templates().items()):
            path = Path(d) / f"{name}.jinja"
            path.write_text(text, encoding="utf-8")
            cases.append((f"llama-cpp-python {name}", text, path, None, "<s>", "</s>"))
        for model in a.model:
            got = gguf_template(model)
            if got is None:
                print(f"SKIP {model}: no tokenizer.chat_template (a base model)")
                continue
            text, bos, eos = got
            cases.append((Path(model).name, text, None, model, bos, eos))

        failures = passes = 0
        for label, text, path, model, bos, eos in cases:
            for conv_name, messages in CONVERSATIONS.items():
                for gen in (True, False):
                    want, want_err = jinja2_render(text, messages, gen, bos, eos)
                    got, got_err = lio_render(a.lio, messages, gen, template=path, model=model, bos=bos, eos=eos)
                    where = f"{label} / {conv_name} / add_generation_prompt={gen}"
                    if want_err is not None:
                        # The template rejects this conversation: LIO must refuse it too.
                        ok = got_err is not None
                        detail = f"jinja2 raised ({want_err[:100]}); LIO " + (
                            f"refused: {got_err[:160]}" if ok else "rendered it")
                    else:
                        ok = got == want
                        detail = "" if ok else (f"LIO failed: {got_err[:300]}" if got is None
                                                else first_difference(got, want))
                    detail = " ".join(detail.split())  # error messages quote template lines
                    print(f"{'PASS' if ok else 'FAIL'} {where}{': ' + detail if detail else ''}")
                    passes += ok
                    failures += not ok
    print(f"{passes} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
