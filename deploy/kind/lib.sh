# Shared settings for the kind scripts (sourced, not run).
# shellcheck shell=bash
set -euo pipefail

KIND_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$KIND_DIR/../.." && pwd)"
STATE="${FLEETGATE_KIND_STATE:-$KIND_DIR/.state}"
REGIONS=(${FLEETGATE_KIND_REGIONS:-us eu ap})
ROUTER_REGION="${FLEETGATE_KIND_ROUTER_REGION:-us}"
IMAGE="${FLEETGATE_KIND_IMAGE:-fleetgate:kind}"
NAMESPACE=fleetgate
MODEL="${FLEETGATE_KIND_MODEL:-meta-llama/Llama-3.1-8B-Instruct}"
ROUTER_HOST_PORT="${FLEETGATE_KIND_ROUTER_PORT:-18000}"   # global endpoint on the host: 127.0.0.1:PORT
ROUTER_HTTP_NODEPORT=30080
ROUTER_GRPC_NODEPORT=30051
GATEWAY_NODEPORT=30880

cluster() { echo "fleetgate-$1"; }
ctx() { echo "kind-fleetgate-$1"; }
log() { printf '[fleetgate-kind] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

need_tools() {
  local missing=()
  for tool in kind docker kubectl helm; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [ ${#missing[@]} -eq 0 ] || die "missing tools: ${missing[*]} (install them to run the kind demo)"
  docker info >/dev/null 2>&1 || die "the Docker daemon is not reachable"
}

# The node's address on the shared `kind` Docker network: other clusters reach NodePorts there.
node_ip() {
  docker inspect -f '{{ (index .NetworkSettings.Networks "kind").IPAddress }}' "$(cluster "$1")-control-plane"
}

sha256() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
random_secret() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
