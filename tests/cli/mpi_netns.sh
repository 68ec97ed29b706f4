#!/usr/bin/env bash
# mpi_netns.sh BIN_DIR WORK_DIR — tensor parallelism across hosts, played on this machine with two
# Linux network namespaces joined by a veth pair (issue 43, item 5), each one a "host" with its
# own network stack: mpirun runs in namespace A (10.231.77.1) with rank 0 and launches Open MPI's
# daemon in namespace B (10.231.77.2) through tests/cli/netns_agent.sh where ssh would go; ranks
# 1 and 2 run there. Open MPI may use only TCP on that link (--mca btl tcp,self: no shared
# memory), so every all-reduce and gather of TP 3 crosses the namespaces as it would cross hosts.
#   1. `lio logits --tensor-parallel-size 3` across the namespaces gives one process's logits
#      (within 1e-4 of the largest |logit|), and greedy `lio generate` its text;
#   2. a worker rank in namespace B killed mid-generation ends every rank with an error within
#      10 s, never a hang.
# Loopback-style private addresses only, nothing leaves the machine; the namespaces are removed
# on exit. Skips (77) where namespaces cannot be made (not root, no `ip`, a container without
# CAP_SYS_ADMIN), or without mpirun, the venv's Python or the model.
source "$(dirname "$0")/smoke_setup.sh" "$@"
source "$(dirname "$0")/mpi_common.sh"
root="$(cd "$(dirname "$0")/../.." && pwd)"
model="${LIO_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
py="$root/.venv/bin/python"
command -v mpirun >/dev/null || { echo "SKIP: no mpirun (scripts/setup.sh installs Open MPI)"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: no ip (iproute2)"; exit 77; }
[[ -f "$model" ]] || { echo "SKIP: model missing: $model"; exit 77; }
[[ -x "$py" ]] || { echo "SKIP: no venv python (scripts/setup.sh)"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

ns_a="lio_tp_a_$$" ns_b="lio_tp_b_$$" veth_a="liova$$" veth_b="liovb$$"
cleanup() {
  pkill -KILL -f "$bin/lio .*--tensor-parallel-size 3" 2>/dev/null || true
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
}
trap cleanup EXIT
if ! { ip netns add "$ns_a" && ip netns add "$ns_b" &&
       ip link add "$veth_a" type veth peer name "$veth_b" &&
       ip link set "$veth_a" netns "$ns_a" && ip link set "$veth_b" netns "$ns_b" &&
       ip -n "$ns_a" addr add 10.231.77.1/24 dev "$veth_a" && ip -n "$ns_b" addr add 10.231.77.2/24 dev "$veth_b" &&
       ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up &&
       ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up; } 2>"$work/netns.err"; then
  echo "SKIP: cannot make network namespaces here: $(head -1 "$work/netns.err")"; exit 77
fi
# One TCP connection from A to B (no ping here): the veth pair carries traffic.
ip netns exec "$ns_b" python3 -c 'import socket; s = socket.create_server(("10.231.77.2", 47701)); s.settimeout(10); s.accept()' &
listener=$!
reached=0
for _ in $(seq 1 40); do
  if ip netns exec "$ns_a" python3 -c 'import socket; socket.create_connection(("10.231.77.2", 47701), timeout=2)' 2>/dev/null; then
    reached=1; break
  fi
  sleep 0.1
done
wait "$listener" 2>/dev/null
((reached)) || fail "namespace A cannot reach B over the veth pair"
echo "ok: namespaces $ns_a (10.231.77.1) and $ns_b (10.231.77.2), joined by a veth pair"

# Two "hosts": mpirun runs in A and starts Open MPI's daemon in B through tests/cli/netns_agent.sh
# (ssh's place), as it would over ssh; rank 0 in A, ranks 1-2 in B. TCP only, on the veth
# subnet only, for the daemons' wire-up (oob) and the ranks' messages (btl); one OpenMP thread a rank.
printf '10.231.77.1 slots=1\n10.231.77.2 slots=2\n' >"$work/hostfile"
export LIO_NETNS_HOSTS="10.231.77.1=$ns_a 10.231.77.2=$ns_b"
mpi=(ip netns exec "$ns_a" "$root/scripts/mpirun.sh" -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=passive
     --hostfile "$work/hostfile" --mca plm_rsh_agent "$root/tests/cli/netns_agent.sh"
     --mca oob_tcp_if_include 10.231.77.0/24 --mca btl tcp,self --mca btl_tcp_if_include 10.231.77.0/24)
across() {  # across SECONDS ARGS...: `lio ARGS --tensor-parallel-size 3` on the two "hosts" (SECONDS x slow factor)
  local limit; limit=$(scaled "$1"); shift
  timeout "$limit" "${mpi[@]}" -n 3 "$bin/lio" "$@" --tensor-parallel-size 3
}

# ---- 1. the same logits and the same greedy text as one process
ids="1,504,3458,282,4649,314,253,1345,30,216,257,2443,28,5248,314,216,33,17,33"
"$bin/lio" logits --model "$model" --ids "$ids" --threads 1 --out "$work/one.f32" >/dev/null 2>"$work/one.err" ||
  fail "one process: $(cat "$work/one.err")"
across 180 logits --model "$model" --ids "$ids" --threads 1 --out "$work/tp3.f32" >/dev/null 2>"$work/tp3.err" ||
  fail "TP 3 across namespaces exited non-zero: $(tail -5 "$work/tp3.err")"
"$py" - "$work/one.f32" "$work/tp3.f32" <<'PY' || exit 1
import sys
import numpy as np
a, b = (np.fromfile(p, dtype=np.float32).reshape(-1, 49152) for p in sys.argv[1:3])
rel = float(np.abs(a - b).max() / np.abs(a).max())
same_top1 = bool((a.argmax(-1) == b.argmax(-1)).all())
print(f"{'ok' if rel < 1e-4 and same_top1 else 'FAIL'}: TP 3 across the namespaces: {a.shape[0]} positions, "
      f"max |dlogit| / max |logit| = {rel:.2e} (bound 1e-4), top-1 equal at every position: {same_top1}")
sys.exit(0 if rel < 1e-4 and same_top1 else 1)
PY
gen=(generate --model "$model" --prompt "The three primary colors are" --max-tokens 24 --temperature 0 --threads 1)
"$bin/lio" "${gen[@]}" >"$work/one.txt" 2>/dev/null || fail "one-process generate"
across 180 "${gen[@]}" >"$work/tp3.txt" 2>"$work/gen.err" || fail "TP 3 generate: $(tail -5 "$work/gen.err")"
cmp -s "$work/one.txt" "$work/tp3.txt" || fail "TP 3 across namespaces: '$(cat "$work/tp3.txt")' vs '$(cat "$work/one.txt")'"
echo "ok: greedy text across the namespaces = one process: $(head -c 70 "$work/one.txt" | tr '\n' ' ')"

# ---- 2. a worker killed mid-request ends every rank within seconds
across 120 generate --model "$model" --prompt "Once upon a time" --max-tokens 4000 --ignore-eos --temperature 0 \
  --threads 1 >"$work/kill.out" 2>"$work/kill.err" &
launcher=$!
victim=$(wait_rank 2 "$bin/lio generate --model" "$work/kill.out")
[[ -n "$victim" ]] || { kill "$launcher"; fail "rank 2 never started: $(tail -3 "$work/kill.err")"; }
[[ "$(ip netns identify "$victim")" == "$ns_b" ]] || fail "rank 2 is not in $ns_b"
rank0=$(rank_pid 0 "$bin/lio generate --model")
[[ -n "$rank0" && "$(ip netns identify "$rank0")" == "$ns_a" ]] || fail "rank 0 is not in $ns_a"
kill -KILL "$victim"
expect_job_ends "$launcher" "$bin/lio generate --model" "worker in $ns_b killed"
echo "PASS"
