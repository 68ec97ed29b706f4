#!/usr/bin/env bash
# gpu_check_gemma3_args.sh — scripts/gpu_check_gemma3.sh keeps its promises without a GPU: it
# parses, --help prints its usage, a bad flag or a missing --from is exit 2, --prepare without
# the model or the bundle is exit 1 naming what is missing. (Its GPU steps run only on a lent
# machine: docs/cuda_backend.md, "Validate on a GPU in one call".)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
script="$root/scripts/gpu_check_gemma3.sh"
work="$1"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
bash -n "$script" || fail "syntax"
bash "$script" --help | grep -q "gpu_check_gemma3.sh --prepare" || fail "--help"
bash "$script" --bogus >/dev/null 2>&1; [[ $? == 2 ]] || fail "a bad flag is not exit 2"
bash "$script" --out "$work" >/dev/null 2>"$work/err"; [[ $? == 2 ]] || fail "no --from is not exit 2"
grep -q "give --from" "$work/err" || fail "no --from: $(cat "$work/err")"
bash "$script" --prepare --model "$work/none.gguf" --out "$work" >/dev/null 2>"$work/err"; [[ $? == 1 ]] || fail "a missing model is not exit 1"
grep -q "none.gguf is missing" "$work/err" || fail "missing model: $(cat "$work/err")"
: >"$work/model.gguf"
bash "$script" --prepare --model "$work/model.gguf" --out "$work" >/dev/null 2>"$work/err"; [[ $? == 1 ]] || fail "a missing bundle is not exit 1"
grep -q "gpu_bundle.sh first" "$work/err" || fail "missing bundle: $(cat "$work/err")"
echo "gpu_check_gemma3.sh: arguments checked"
