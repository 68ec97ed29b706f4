#!/usr/bin/env bash
# mpirun.sh — Open MPI's mpirun with the settings LIO's tests and benchmarks need on any machine:
#   --oversubscribe      more ranks than cores (the 2-core CI machine runs 3 and 4 ranks)
#   --bind-to none       ranks are not pinned to one core each (OpenMP threads may use all)
#   --allow-run-as-root  when run as root (containers, CI)
#   btl_vader_single_copy_mechanism none   shared-memory transport without ptrace/CMA, which
#                        containers often forbid
#   -x LIO_*             every LIO_ variable set here (LIO_MODEL, LIO_COMM_TIMEOUT_S, ...) reaches
#                        ranks on other hosts too
# GPUs: each rank picks its host's next GPU itself (local rank -> device, cuda_device_for_rank;
# NCCL needs one per rank), so nothing here sets CUDA_VISIBLE_DEVICES; set it per host to narrow
# the GPUs a job uses.
# Everything else is passed through: scripts/mpirun.sh -n 3 build/bin/lio generate --tensor-parallel-size 3
# Exit status: mpirun's (non-zero when any rank fails; mpirun then ends the others).
set -euo pipefail
if ! command -v mpirun >/dev/null; then
  echo "mpirun.sh: mpirun not found: install Open MPI (scripts/setup.sh does: openmpi-bin libopenmpi-dev)" >&2
  exit 2
fi
args=(--oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
[[ "$(id -u)" == 0 ]] && args+=(--allow-run-as-root)
while IFS='=' read -r name _; do args+=(-x "$name"); done < <(env | grep '^LIO_[A-Z0-9_]*=' || true)
exec mpirun "${args[@]}" "$@"
