#!/usr/bin/env bash
# One chat completion through the global endpoint, and a check that the fleet view lists every cluster.
source "$(dirname "$0")/lib.sh"
[ -f "$STATE/api-key" ] || die "run deploy/kind/up.sh first"
endpoint="http://127.0.0.1:$ROUTER_HOST_PORT"

fleet="$(curl -fsS -H "Authorization: Bearer $(cat "$STATE/admin-key")" "$endpoint/fleet")"
for cid in "${CLUSTERS[@]}"; do
  grep -q "\"$(cluster "$cid")\"" <<<"$fleet" || die "cluster $(cluster "$cid") missing from /fleet"
done

body=$(printf '{"model": "%s", "messages": [{"role": "user", "content": "Say hello from kind."}], "max_tokens": 16}' "$MODEL")
reply="$(curl -fsS "$endpoint/v1/chat/completions" \
  -H "Authorization: Bearer $(cat "$STATE/api-key")" -H 'Content-Type: application/json' -d "$body")"
grep -q '"choices"' <<<"$reply" || die "unexpected reply: $reply"
log "ok: $(grep -o '"finish_reason":"[a-z]*"' <<<"$reply" | head -1)"

# Straight to a cluster gateway, bypassing the router: refused (only the router's signature is accepted).
for cid in "${CLUSTERS[@]}"; do
  code="$(curl -s -o /dev/null -w '%{http_code}' "http://$(node_ip "$cid"):$GATEWAY_NODEPORT/v1/chat/completions" \
    -H 'Content-Type: application/json' -d "$body")"
  [ "$code" = 401 ] || die "gateway of $(cluster "$cid") answered $code without the router's credential (want 401)"
done
log "ok: every gateway refuses requests that bypass the router (401)"
echo "$reply"
