#!/usr/bin/env bash
# One chat completion through the global endpoint, and a check that the fleet view lists every cluster.
source "$(dirname "$0")/lib.sh"
[ -f "$STATE/api-key" ] || die "run deploy/kind/up.sh first"
endpoint="http://127.0.0.1:$ROUTER_HOST_PORT"

fleet="$(curl -fsS "$endpoint/fleet")"
for region in "${REGIONS[@]}"; do
  grep -q "\"$(cluster "$region")\"" <<<"$fleet" || die "cluster $(cluster "$region") missing from /fleet"
done

body=$(printf '{"model": "%s", "messages": [{"role": "user", "content": "Say hello from kind."}], "max_tokens": 16}' "$MODEL")
reply="$(curl -fsS "$endpoint/v1/chat/completions" \
  -H "Authorization: Bearer $(cat "$STATE/api-key")" -H 'Content-Type: application/json' -d "$body")"
grep -q '"choices"' <<<"$reply" || die "unexpected reply: $reply"
log "ok: $(grep -o '"finish_reason":"[a-z]*"' <<<"$reply" | head -1)"
echo "$reply"
