#!/usr/bin/env bash
# netns_agent.sh HOST COMMAND... — Open MPI's remote launcher (plm_rsh_agent, ssh's place) for
# tests/cli/mpi_netns.sh: runs COMMAND (the orted daemon) inside the network namespace that plays
# HOST, as ssh would run it on that host. LIO_NETNS_HOSTS maps hosts to namespaces:
# "10.231.77.1=ns_a 10.231.77.2=ns_b".
set -euo pipefail
while [[ $# -gt 0 && $1 == -* ]]; do shift; done  # ssh-style options, if any
host=$1; shift
for pair in ${LIO_NETNS_HOSTS:?netns_agent.sh: LIO_NETNS_HOSTS is not set}; do
  if [[ ${pair%%=*} == "$host" ]]; then exec ip netns exec "${pair#*=}" /bin/sh -c "$*"; fi
done
echo "netns_agent.sh: no namespace plays host $host (LIO_NETNS_HOSTS=$LIO_NETNS_HOSTS)" >&2
exit 255
