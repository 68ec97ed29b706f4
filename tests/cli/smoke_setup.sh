# smoke_setup.sh — sourced first by the *_smoke.sh scripts (`source smoke_setup.sh "$@"`):
# takes their BIN_DIR WORK_DIR arguments as $bin and $work, empties $work, skips (exit 77)
# without python3 (the scripts check JSON with it) and writes the tiny test models to
# $work/models.
set -uo pipefail
bin="$1"
work="$2"
rm -rf "$work" && mkdir -p "$work"
if ! command -v python3 >/dev/null 2>&1; then echo "SKIP: python3 is needed to check the JSON"; exit 77; fi
"$bin/make_test_models" "$work/models" >/dev/null || { echo "FAIL: make_test_models"; exit 1; }
