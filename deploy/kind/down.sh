#!/usr/bin/env bash
# Delete the kind clusters and the local state (tokens, API key, values).
source "$(dirname "$0")/lib.sh"
command -v kind >/dev/null 2>&1 || die "kind is not installed"
for cid in "${CLUSTERS[@]}"; do
  name="$(cluster "$cid")"
  if kind get clusters 2>/dev/null | grep -qx "$name"; then
    log "deleting $name"
    kind delete cluster --name "$name"
  fi
done
rm -rf "$STATE"
