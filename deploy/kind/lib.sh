# Shared settings for the kind scripts (sourced, not run).
# shellcheck shell=bash
set -euo pipefail

KIND_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$KIND_DIR/../.." && pwd)"
STATE="${FLEETGATE_KIND_STATE:-$KIND_DIR/.state}"
PYTHON="${FLEETGATE_KIND_PYTHON:-python3}"   # stdlib only for the next line; the scenario runner needs httpx
# The clusters and their regions come from the scenario definitions the netns test bed uses
# (fleetgate/netbed/scenarios.py, KIND_TOPOLOGY): kind cluster `fleetgate-<id>` per cluster id.
CLUSTERS=()
declare -A REGION_OF=()
while read -r _id _region; do
  CLUSTERS+=("$_id")
  REGION_OF[$_id]="$_region"
done < <(cd "$ROOT" && "$PYTHON" -m fleetgate.netbed.scenarios kind-clusters)
[ ${#CLUSTERS[@]} -gt 0 ] || { printf '[fleetgate-kind] error: no clusters from fleetgate.netbed.scenarios\n' >&2; exit 1; }
ROUTER_CLUSTER="${FLEETGATE_KIND_ROUTER_CLUSTER:-${CLUSTERS[0]}}"   # the global router runs in this one
IMAGE_REPO="${FLEETGATE_KIND_IMAGE_REPO:-fleetgate}"
IMAGE=""   # set by build_image: $IMAGE_REPO:kind-<content hash>
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

# The tag names the image's content (its config digest), so a re-run after a code change deploys a new
# tag and the pods roll; an unchanged tree rebuilds from cache to the same tag and nothing restarts.
content_tag() {
  local id
  id="$(docker image inspect -f '{{.Id}}' "$1")" || die "no image $1"
  id="${id#sha256:}"
  [[ "$id" =~ ^[0-9a-f]{12,}$ ]] || die "unexpected image id for $1: $id"
  printf '%s:kind-%s' "$IMAGE_REPO" "${id:0:12}"
}

build_image() {
  docker build -q ${FLEETGATE_KIND_BASE_IMAGE:+--build-arg BASE_IMAGE="$FLEETGATE_KIND_BASE_IMAGE"} \
    -t "$IMAGE_REPO:kind-build" "$ROOT" >/dev/null
  IMAGE="$(content_tag "$IMAGE_REPO:kind-build")"
  docker tag "$IMAGE_REPO:kind-build" "$IMAGE"
}

# kind's load of a docker-image fails on Docker's containerd image store (kubernetes-sigs/kind#3795);
# an archive loads on every store.
load_image() {
  local archive="$STATE/image.tar"
  docker save -o "$archive" "$IMAGE"
  kind load image-archive "$archive" --name "$1"
  rm -f "$archive"
}
