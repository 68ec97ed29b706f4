#!/usr/bin/env bash
# mpi_smoke.sh BIN_DIR WORK_DIR — chapter 08's programs under scripts/mpirun.sh on the real model:
#   1. `lio generate --tensor-parallel-size 3` on 3 ranks prints the single-process text (greedy);
#   2. `lio batch` on 3 ranks (TP 3) and on 2 ranks (PP 2) writes the single-process results;
#   3. lio-server on 3 ranks answers a greedy chat completion with the single-process server's text;
#   4. failures end every rank within seconds with one clear error, never a hang: a world size
#      that disagrees with TP x PP, a TP size that does not split the model (the message names
#      1 and 3), and a worker rank killed mid-generation.
# Skips (77) without mpirun, python3 or the model.
source "$(dirname "$0")/smoke_setup.sh" "$@"
source "$(dirname "$0")/mpi_common.sh"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mpirun_sh="$root/scripts/mpirun.sh"
model="${LIO_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (scripts/setup.sh installs Open MPI)"; exit 77; }
[[ -f "$model" ]] || { echo "SKIP: model missing: $model"; exit 77; }
mpi=("$mpirun_sh" -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=passive)
fail() { echo "FAIL: $*"; exit 1; }
# f32 activations (the chapter programs' exact path): the ranks then differ from one process only in
# the all-reduce's summation order, in the last bits. With lio's default, int8 per 32-block, rounding
# x to int8 turns those bits into whole code steps that grow through the layers: TP 3's logits sit
# about 1 from one process's, as far as a one-ulp nudge of one norm weight moves one process's, and
# as far as int8 is from f32 (bench/results/08_tp_numerics_cpu.md, docs/08_tensor_parallel.md
# section 8), enough to flip a near-tie in greedy text.
gen=(generate --model "$model" --prompt "The three primary colors are" --max-tokens 24 --temperature 0 --threads 1
     --activations f32)

# ---- 1. generate
"$bin/lio" "${gen[@]}" >"$work/single.txt" 2>"$work/single.err" || fail "single-process generate: $(cat "$work/single.err")"
timeout "$(scaled 120)" "${mpi[@]}" -n 3 "$bin/lio" "${gen[@]}" --tensor-parallel-size 3 >"$work/tp3.txt" 2>"$work/tp3.err" ||
  fail "TP 3 generate exited non-zero: $(cat "$work/tp3.err")"
cmp -s "$work/single.txt" "$work/tp3.txt" || fail "TP 3 text differs: '$(cat "$work/tp3.txt")' vs '$(cat "$work/single.txt")'"
echo "ok: TP 3 generate = single process: $(head -c 80 "$work/single.txt" | tr '\n' ' ')"

# ---- 2. batch
printf '%s\n' '{"prompt": "Paris is"}' '{"prompt": "One, two, three,"}' '{"messages": [{"role": "user", "content": "Name a fruit."}]}' \
  >"$work/prompts.jsonl"
batch=(batch --model "$model" --prompts "$work/prompts.jsonl" --max-tokens 12 --temperature 0 --threads 1
       --activations f32)
"$bin/lio" "${batch[@]}" --out "$work/b1.jsonl" 2>"$work/b1.err" || fail "single batch: $(cat "$work/b1.err")"
for grid in "3 --tensor-parallel-size 3" "2 --pipeline-parallel-size 2"; do
  set -- $grid
  n=$1; shift
  timeout "$(scaled 180)" "${mpi[@]}" -n "$n" "$bin/lio" "${batch[@]}" --out "$work/b$n.jsonl" "$@" 2>"$work/b$n.err" ||
    fail "batch on $n ranks ($*): $(cat "$work/b$n.err")"
  python3 - "$work/b1.jsonl" "$work/b$n.jsonl" "$*" <<'PY' || exit 1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
key = lambda l: (l.get("index"), l.get("text"), l.get("token_ids"))
if [key(x) for x in a] != [key(x) for x in b]:
    print(f"FAIL: lio batch {sys.argv[3]} differs from one process:\n{a}\n{b}"); sys.exit(1)
print(f"ok: lio batch {sys.argv[3]} = single process ({len(a)} requests)")
PY
done

# ---- 3. server
serve_and_ask() {  # serve_and_ask OUT [LAUNCHER... --] [SERVER FLAGS...]: starts lio-server, asks, stops it
  local out=$1; shift
  local launcher=()
  if [[ " $* " == *" -- "* ]]; then
    while [[ $1 != "--" ]]; do launcher+=("$1"); shift; done
    shift
  fi
  "${launcher[@]}" "$bin/lio-server" --model "$model" --port 0 --threads 1 "$@" >"$out.log" 2>&1 &
  local pid=$! port=""
  for _ in $(seq 1 "$(scaled 120)"); do
    port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$out.log" | head -1)
    [[ -n "$port" ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  [[ -n "$port" ]] || { cat "$out.log"; kill "$pid" 2>/dev/null; fail "lio-server did not start (${launcher[*]} $*)"; }
  python3 - "$port" "$out" "$(scaled 120)" <<'PY'
import json, sys, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}/v1"
wait_s = float(sys.argv[3])
model = json.load(urllib.request.urlopen(base + "/models", timeout=wait_s))["data"][0]["id"]
req = urllib.request.Request(base + "/chat/completions", method="POST",
                             headers={"Content-Type": "application/json"},
                             data=json.dumps({"model": model, "temperature": 0, "max_tokens": 16,
                                              "messages": [{"role": "user", "content": "What is 2 + 2?"}]}).encode())
body = json.load(urllib.request.urlopen(req, timeout=wait_s))
open(sys.argv[2], "w").write(body["choices"][0]["message"]["content"])
PY
  local rc=$?
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 "$(scaled 20)"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  [[ $rc == 0 ]] || { cat "$out.log"; fail "the chat completion failed (${launcher[*]} $*)"; }
}
serve_and_ask "$work/srv1" --activations f32
serve_and_ask "$work/srv3" "${mpi[@]}" -n 3 -- --tensor-parallel-size 3 --activations f32
cmp -s "$work/srv1" "$work/srv3" || fail "lio-server on 3 ranks answered '$(cat "$work/srv3")', one process '$(cat "$work/srv1")'"
echo "ok: lio-server on 3 ranks (TP 3) = one process: $(cat "$work/srv1" | tr '\n' ' ')"

# ---- 4. failures: every rank ends within seconds with one clear error
expect_failure() {  # expect_failure WHAT PATTERN SECONDS COMMAND... (SECONDS x slow factor)
  local what=$1 pattern=$2 limit; limit=$(scaled "$3"); shift 3
  local t0=$SECONDS
  timeout "$(scaled 60)" "$@" >"$work/f.out" 2>"$work/f.err"
  local rc=$? took=$((SECONDS - t0))
  [[ $rc != 0 && $rc != 124 ]] || fail "$what: exit $rc (124 = hung until timeout)"
  ((took <= limit)) || fail "$what: took $took s (limit $limit)"
  grep -q -- "$pattern" "$work/f.err" || { cat "$work/f.err"; fail "$what: no '$pattern' in stderr"; }
  echo "ok: $what -> exit $rc in $took s: $(grep -m1 -- "$pattern" "$work/f.err")"
}
expect_failure "3 ranks asked, 2 started" "needs 3" 20 "${mpi[@]}" -n 2 "$bin/lio" "${gen[@]}" --tensor-parallel-size 3
expect_failure "TP 2 on 9 heads / 3 KV heads" "that split it are 1, 3" 20 "${mpi[@]}" -n 2 "$bin/lio" "${gen[@]}" \
  --tensor-parallel-size 2
expect_failure "TP 3 without mpirun" "start it with scripts/mpirun.sh -n 3" 20 "$bin/lio" "${gen[@]}" --tensor-parallel-size 3

# A worker killed mid-generation: mpirun must end the driver and the other worker.
"${mpi[@]}" -n 3 "$bin/lio" generate --model "$model" --prompt "Once upon a time" --max-tokens 4000 --ignore-eos \
  --temperature 0 --threads 1 --tensor-parallel-size 3 >"$work/kill.out" 2>"$work/kill.err" &
launcher=$!
victim=$(wait_rank 2 "$bin/lio generate --model" "$work/kill.out")
[[ -n "$victim" ]] || { kill "$launcher"; fail "rank 2 never started"; }
kill -KILL "$victim"
expect_job_ends "$launcher" "$bin/lio generate --model" "worker killed"
echo "PASS"
