#!/usr/bin/env bash
# The netns test bed's scenarios (fleetgate/netbed/scenarios.py) on the kind fleet of up.sh: the ones
# kind can run (rolling restart, a cluster lost mid-stream) with the same load and checks as
# tests/multicluster/; the rest are listed as skipped with what they need. Extra arguments go to the
# runner (e.g. --only rolling-restart, --list). Its Python needs httpx: FLEETGATE_KIND_PYTHON=.venv/bin/python
source "$(dirname "$0")/lib.sh"
[ -f "$STATE/api-key" ] || die "run deploy/kind/up.sh first"
command -v kubectl >/dev/null 2>&1 || die "missing tool: kubectl"
cd "$ROOT"
exec "$PYTHON" -m fleetgate.netbed.kind --state "$STATE" --endpoint "http://127.0.0.1:$ROUTER_HOST_PORT" \
  --router-cluster "$ROUTER_CLUSTER" "$@"
