#!/usr/bin/env bash
# Chapter 03: `lio perplexity` against llama.cpp's `llama-perplexity` on the same GGUF files and
# the same text, same chunking (-c), one chunk per batch (-b = -c). The issue's bar: equal to
# within 1%. llama-perplexity is built once from the llama.cpp vendored in the pinned
# llama-cpp-python sdist (bench/batched/build_llama_tools.sh --perplexity); nothing in the test
# suite depends on it (COURSE.md, "Performance method").
#
# Usage: bench/03_quantization/check_perplexity.sh [--quick]
#   --quick   4 chunks instead of all (a minute instead of a few)
#   3-bit files: make them with --llama-blocks (lio quantize, ch03_quantization); LIO's packed
#   Q3_0 / Q3_1 blocks are not a ggml type, and llama-perplexity refuses them.
# Env: BUILD_DIR (build), LLAMA_BUILD_DIR (build-llama), TEXT (default
#   /usr/share/common-licenses/GPL-3: real English from Debian's base-files), CTX (512),
#   MODELS (space-separated GGUF paths; default the Q4_1 file as shipped and the F32 copy),
#   THREADS (nproc), OUT (bench/results/03_perplexity_check.md; the same table goes to OUT's .json).
# Exit status: 0 when every model agrees within 1%, 1 otherwise.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
export PYTHONPATH="$root/bench${PYTHONPATH:+:$PYTHONPATH}"  # the benchmark toolkit, liobench, for any python3
cd "$root"
build="${BUILD_DIR:-build}"
llama_build="${LLAMA_BUILD_DIR:-$root/build-llama}"
text="${TEXT:-/usr/share/common-licenses/GPL-3}"
ctx="${CTX:-512}"
threads="${THREADS:-$(nproc)}"
out="${OUT:-bench/results/03_perplexity_check.md}"
models="${MODELS:-models/SmolLM2-135M-Instruct.Q4_1.gguf models/SmolLM2-135M-Instruct.F32.gguf}"
chunks=-1
[[ "${1:-}" == "--quick" ]] && chunks=4

[[ -x "$build/bin/lio" ]] || { echo "check_perplexity: $build/bin/lio not built (scripts/build.sh)" >&2; exit 1; }
[[ -r "$text" ]] || { echo "check_perplexity: cannot read TEXT=$text" >&2; exit 1; }
LLAMA_BUILD_DIR="$llama_build" bash bench/batched/build_llama_tools.sh --perplexity

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
# results_meta's rule: LIO_COMMIT when set, else HEAD, "-dirty" only for changed code.
commit="$(python3 -c 'from liobench.results_meta import git_commit; print(git_commit())')"
command="MODELS=\"$models\" BUILD_DIR=$build bench/03_quantization/check_perplexity.sh $*"
{
  echo "# Chapter 03: lio perplexity vs llama-perplexity"
  echo
  echo "- Machine: $cpu, $(nproc) cores, $threads threads"
  echo "- Command: \`$command\`; commit $commit; date $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- Text: \`$text\` ($(wc -c <"$text") bytes); chunks of $ctx tokens, second half of each scored;" \
       "chunks: $([[ $chunks -lt 0 ]] && echo all || echo $chunks)"
  echo "- Commands: \`$build/bin/lio perplexity --model M --text T -c $ctx --chunks $chunks --json\` and" \
       "\`llama-perplexity -m M -f T -c $ctx -b $ctx --chunks $chunks -t $threads\` (vendored llama.cpp of" \
       "llama-cpp-python $(grep -E '^llama-cpp-python==' scripts/requirements.txt | cut -d= -f3))"
  echo
  echo "| model | lio PPL | llama-perplexity PPL | lio / llama | within 1% |"
  echo "|---|---:|---:|---:|---|"
} >"$out.tmp"
status=0
for m in $models; do
  [[ -f "$m" ]] || { echo "check_perplexity: no model $m (scripts/setup.sh fetches it)" >&2; exit 1; }
  lio_json="$(OMP_NUM_THREADS="$threads" "$build/bin/lio" perplexity --model "$m" --text "$text" -c "$ctx" \
              --chunks "$chunks" --json)"
  lio_ppl="$(printf '%s' "$lio_json" | sed -E 's/.*"ppl":([0-9.eE+-]+).*/\1/')"
  llama_ppl="$("$llama_build/bin/llama-perplexity" -m "$m" -f "$text" -c "$ctx" -b "$ctx" --chunks "$chunks" \
               -t "$threads" 2>&1 | sed -nE 's/.*Final estimate: PPL = ([0-9.]+).*/\1/p')"
  [[ -n "$llama_ppl" ]] || { echo "check_perplexity: llama-perplexity printed no estimate for $m" >&2; exit 1; }
  row="$(awk -v a="$lio_ppl" -v b="$llama_ppl" 'BEGIN {
    r = a / b; ok = (r >= 0.99 && r <= 1.01) ? "yes" : "NO";
    printf "%.4f | %.4f | %.4f | %s", a, b, r, ok }')"
  echo "| $(basename "$m") | $row |" >>"$out.tmp"
  echo "check_perplexity: $(basename "$m"): $row" >&2
  [[ "$row" == *"| yes" ]] || status=1
done
mv "$out.tmp" "$out"
# No local paths in what is recorded (results_meta.local_path_free: the repository root is cut, $HOME
# becomes ~, anything under /tmp becomes TMP/); the .json's provenance goes through the same function.
python3 -m liobench.results_meta strip-paths "$out"
# The same table as JSON beside it (what the lessons render from), with the run's provenance.
python3 -m liobench.results_meta md-table-json "$out" "${out%.md}.json" \
  --keys model,lio_ppl,llama_ppl,ratio,within_1pct --command "$command" \
  --set "text=$text" --set "ctx=$ctx" --set "chunks=$chunks" --set "threads=$threads"
cat "$out"
exit $status
