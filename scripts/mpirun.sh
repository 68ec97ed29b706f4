#!/usr/bin/env bash
# mpirun.sh — Open MPI's mpirun with the settings LIO's tests and benchmarks need on any machine:
#   --oversubscribe      more ranks than cores (the 2-core CI machine runs 3 and 4 ranks)
#   --bind-to none       ranks are not pinned to one core each (OpenMP threads may use all)
#   --allow-run-as-root  when run as root (containers, CI)
#   btl_vader_single_copy_mechanism none   shared-memory transport without ptrace/CMA, which
#                        containers often forbid
# Everything else is passed through: scripts/mpirun.sh -n 3 build/bin/lio generate --tensor-parallel-size 3
# Exit status: mpirun's (non-zero when any rank fails; mpirun then ends the others).
set -euo pipefail
if ! command -v mpirun >/dev/null; then
  echo "mpirun.sh: mpirun not found: install Open MPI (scripts/setup.sh does: openmpi-bin libopenmpi-dev)" >&2
  exit 2
fi
args=(--oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none)
[[ "$(id -u)" == 0 ]] && args+=(--allow-run-as-root)
exec mpirun "${args[@]}" "$@"
