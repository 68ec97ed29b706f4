#!/usr/bin/env bash
# mpi_pp_hybrid.sh BIN_DIR WORK_DIR — pipeline parallelism keeps the hybrid KV pool's groups (issue
# 62, item 1) on the tiny gemma3 model (6 layers, window 16: five windowed layers, then a global one;
# lanes 1, six KV cache groups). Under 2 stages, stage 0 (layers 0-2) holds no layer of group 0 (the
# full-attention group) and stage 1 holds two windowed groups and the full one. Checks:
#   1. `lio batch` greedy on 6 prompts that run past the window: PP 2 with the hybrid pool gives the
#      token ids of one process, hybrid or not (--disable-hybrid-kv-cache-manager), and reports the
#      six groups and the one-process block count at the same --kv-cache-mib (without the hybrid
#      pool a stage's block holds its own 3 layers: twice one process's blocks);
#   2. the same at --kv-cache-mib 1 with 64-token blocks, where the pool is short and requests are
#      preempted (recompute) on both sides;
#   3. the same short pool with --preemption swap (every group's live blocks to host and back);
#   4. prompts sharing a prefix through the radix prefix cache (one tree per group) at a short pool;
#   5. `lio logits` PP 2 bitwise equal to one process.
# Skips (77) without mpirun or python3.
source "$(dirname "$0")/smoke_setup.sh" "$@"
root="$(cd "$(dirname "$0")/../.." && pwd)"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (scripts/setup.sh installs Open MPI)"; exit 77; }
mpi=("$root/scripts/mpirun.sh" -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=passive -n 2)
fail() { echo "FAIL: $*"; exit 1; }
model="$work/gemma3.gguf"
"$bin/make_test_models" --family gemma3 "$model" >/dev/null || fail "make_test_models --family gemma3"
python3 - "$work/prompts.jsonl" <<'PY'
import json, random, sys
r = random.Random(5)
with open(sys.argv[1], "w") as f:
    for i in range(6):  # 20 .. 65 prompt tokens, 40 generated: every windowed group slides
        ids = [r.randint(3, 250) for _ in range(20 + 9 * i)]
        f.write(json.dumps({"prompt_token_ids": ids, "max_tokens": 40, "ignore_eos": True}) + "\n")
PY
batch=(batch --model "$model" --prompts "$work/prompts.jsonl" --temperature 0 --threads 1)

# run NAME RANKS [FLAGS...]: lio batch on 1 or 2 ranks (2: --pipeline-parallel-size 2) into $work/NAME.*
run() {
  local name=$1 ranks=$2; shift 2
  local launch=()
  if [[ $ranks == 2 ]]; then launch=(timeout 120 "${mpi[@]}"); set -- "$@" --pipeline-parallel-size 2; fi
  "${launch[@]}" "$bin/lio" "${batch[@]}" --out "$work/$name.jsonl" --summary "$work/$name.json" "$@" \
    2>"$work/$name.err" || fail "$name: $(tail -3 "$work/$name.err")"
}
run one 1
run one_plain 1 --disable-hybrid-kv-cache-manager
run pp2 2
run pp2_plain 2 --disable-hybrid-kv-cache-manager
small=(--kv-cache-mib 1 --block-size 64)
run one_small 1 "${small[@]}"
run pp2_small 2 "${small[@]}"
run pp2_small_plain 2 "${small[@]}" --disable-hybrid-kv-cache-manager
run pp2_small_swap 2 "${small[@]}" --preemption swap
# 4. Prompts sharing a 30-token prefix: the radix prefix cache (one tree per group) on PP 2 with a
#    short pool gives one process's uncached token ids.
python3 - "$work/shared.jsonl" <<'PY'
import json, random, sys
r = random.Random(7)
head = [r.randint(3, 250) for _ in range(30)]
with open(sys.argv[1], "w") as f:
    for i in range(6):
        ids = head + [r.randint(3, 250) for _ in range(5 + 3 * i)]
        f.write(json.dumps({"prompt_token_ids": ids, "max_tokens": 24, "ignore_eos": True}) + "\n")
PY
batch=(batch --model "$model" --prompts "$work/shared.jsonl" --temperature 0 --threads 1)
run shared_one 1
run shared_pp2_radix 2 --prefix-cache radix --kv-cache-mib 1 --block-size 16 --max-num-seqs 2  # later requests hit

python3 - "$work" <<'PY' || exit 1
import json, sys
w = sys.argv[1]
def ids(name):
    return [(l["index"], l["token_ids"]) for l in map(json.loads, open(f"{w}/{name}.jsonl")) if l]
def summary(name):
    return json.load(open(f"{w}/{name}.json"))
ref = ids("one")
assert len(ref) == 6 and all(len(t) == 40 for _, t in ref), ref
for name in ["one_plain", "pp2", "pp2_plain", "one_small", "pp2_small", "pp2_small_plain"]:
    if ids(name) != ref:
        print(f"FAIL: {name} token ids differ from one process's:\n{ids(name)}\n{ref}"); sys.exit(1)
    s = summary(name)
    groups = 1 if name.endswith("plain") else 6
    if s["kv_cache_groups"] != groups:
        print(f"FAIL: {name} reports {s['kv_cache_groups']} KV cache groups, expected {groups}"); sys.exit(1)
    print(f"ok: {name} = one process ({groups} groups, {s['settings']['kv_blocks']} blocks, "
          f"{s['n_preemptions']} preemptions)")
for a, b in [("pp2", "one"), ("pp2_small", "one_small")]:
    na, nb = summary(a)["settings"]["kv_blocks"], summary(b)["settings"]["kv_blocks"]
    if na != nb:
        print(f"FAIL: {a} has {na} KV blocks, one process {nb} at the same --kv-cache-mib"); sys.exit(1)
# One group: a stage's block holds its 3 layers, not the model's 6 (twice the blocks of one process).
if summary("pp2_plain")["settings"]["kv_blocks"] != 2 * summary("one_plain")["settings"]["kv_blocks"]:
    print("FAIL: PP 2 without the hybrid pool does not hold twice one process's blocks"); sys.exit(1)
if ids("pp2_small_swap") != ref:
    print("FAIL: PP 2 with swap preemption differs from one process"); sys.exit(1)
print(f"ok: pp2_small_swap = one process ({summary('pp2_small_swap')['n_preemptions']} preemptions)")
if ids("shared_pp2_radix") != ids("shared_one"):
    print("FAIL: PP 2 with the radix prefix cache differs from one process uncached"); sys.exit(1)
hits = summary("shared_pp2_radix")["prefix_cache_hits"]
if hits < 1:
    print("FAIL: the radix run hit nothing (the check needs cached prefixes)"); sys.exit(1)
print(f"ok: shared_pp2_radix = one process uncached ({hits} prefix-cache hit tokens)")
for name in ["one_small", "pp2_small", "pp2_small_plain", "pp2_small_swap"]:
    if summary(name)["n_preemptions"] < 1:
        print(f"FAIL: {name}: the short pool preempted nothing (the check needs preemption)"); sys.exit(1)
PY

ids=$(python3 -c "import random; r = random.Random(9); print(','.join(str(r.randint(3, 250)) for _ in range(40)))")
"$bin/lio" logits --model "$model" --ids "$ids" --threads 1 --out "$work/logits1.f32" 2>"$work/logits1.err" ||
  fail "logits: $(tail -3 "$work/logits1.err")"
timeout 120 "${mpi[@]}" "$bin/lio" logits --model "$model" --ids "$ids" --threads 1 --out "$work/logits2.f32" \
  --pipeline-parallel-size 2 2>"$work/logits2.err" || fail "PP 2 logits: $(tail -3 "$work/logits2.err")"
cmp -s "$work/logits1.f32" "$work/logits2.f32" || fail "PP 2 logits are not bitwise one process's"
echo "ok: lio logits PP 2 bitwise = one process ($(stat -c %s "$work/logits1.f32") bytes)"
