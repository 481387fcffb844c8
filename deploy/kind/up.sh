#!/usr/bin/env bash
# One kind cluster per cluster of the shared scenario topology (fleetgate/netbed/scenarios.py,
# KIND_TOPOLOGY: fleetgate-use1, -euw1, -aps1 in us-east, eu-west, ap-south), simulated model servers in
# each, a cluster gateway per cluster and one global router (in the first) that every agent reports to.
# Then: deploy/kind/smoke.sh sends a request through the global endpoint, deploy/kind/scenarios.sh runs
# the netns bed's scenarios that kind can run; deploy/kind/down.sh cleans up.
source "$(dirname "$0")/lib.sh"
need_tools
mkdir -p "$STATE"
chmod 700 "$STATE"

log "building image $IMAGE_REPO"
build_image
log "image $IMAGE"

for cid in "${CLUSTERS[@]}"; do
  name="$(cluster "$cid")"
  if kind get clusters 2>/dev/null | grep -qx "$name"; then
    log "cluster $name exists"
  else
    log "creating cluster $name"
    if [ "$cid" = "$ROUTER_CLUSTER" ]; then
      kind create cluster --name "$name" --wait 120s --config - <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    extraPortMappings:
      - containerPort: $ROUTER_HTTP_NODEPORT
        hostPort: $ROUTER_HOST_PORT
        listenAddress: 127.0.0.1
YAML
    else
      kind create cluster --name "$name" --wait 120s
    fi
  fi
  load_image "$name"
  kubectl --context "$(ctx "$cid")" create namespace "$NAMESPACE" --dry-run=client -o yaml |
    kubectl --context "$(ctx "$cid")" apply -f - >/dev/null
done

# Secrets: one agent token per cluster and a demo API key; only their SHA-256 reach the router.
# Each cluster also gets a router->gateway HMAC secret, held by the router and by that gateway.
[ -f "$STATE/api-key" ] || printf 'sk-fleetgate-%s' "$(random_secret)" >"$STATE/api-key"
[ -f "$STATE/admin-key" ] || printf 'sk-fleetgate-admin-%s' "$(random_secret)" >"$STATE/admin-key"
for cid in "${CLUSTERS[@]}"; do
  [ -f "$STATE/token-$cid" ] || random_secret >"$STATE/token-$cid"
  [ -f "$STATE/gateway-secret-$cid" ] || random_secret >"$STATE/gateway-secret-$cid"
done

router_ip="$(node_ip "$ROUTER_CLUSTER")"
rc="$(ctx "$ROUTER_CLUSTER")"

# TLS for the capacity port: a self-signed certificate for the router node's address (agents verify
# it as their CA). In a real cluster cert-manager issues it (capacityTls.certManager).
command -v openssl >/dev/null 2>&1 || die "missing tool: openssl (for the capacity port's TLS certificate)"
if [ ! -f "$STATE/capacity-tls.crt" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj "/CN=fleetgate-capacity" -addext "subjectAltName=IP:$router_ip" \
    -keyout "$STATE/capacity-tls.key" -out "$STATE/capacity-tls.crt" 2>/dev/null
fi
kubectl --context "$rc" -n "$NAMESPACE" create secret tls fleetgate-capacity-tls \
  --cert="$STATE/capacity-tls.crt" --key="$STATE/capacity-tls.key" --dry-run=client -o yaml |
  kubectl --context "$rc" apply -f - >/dev/null
gateway_secret_args=()
for cid in "${CLUSTERS[@]}"; do
  gateway_secret_args+=("--from-file=$(cluster "$cid")=$STATE/gateway-secret-$cid")
done
kubectl --context "$rc" -n "$NAMESPACE" create secret generic fleetgate-router-gateway-secrets \
  "${gateway_secret_args[@]}" --dry-run=client -o yaml | kubectl --context "$rc" apply -f - >/dev/null
{
  cat <<YAML
replicaCount: 1
autoscaling: {enabled: false}
podDisruptionBudget: {enabled: false}
image: {repository: ${IMAGE%:*}, tag: ${IMAGE##*:}, pullPolicy: Never}
resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 512Mi}}
config:
  region: ${REGION_OF[$ROUTER_CLUSTER]}
  adminKeySha256: "$(sha256 "$(cat "$STATE/admin-key")")"
capacityTls: {enabled: true, secretName: fleetgate-capacity-tls}
gatewaySecrets: {existingSecret: fleetgate-router-gateway-secrets}
service: {type: NodePort, port: 80, nodePort: $ROUTER_HTTP_NODEPORT}
capacityService: {type: NodePort, port: 50051, nodePort: $ROUTER_GRPC_NODEPORT}
tenants:
  - name: kind-demo
    apiKeySha256: ["$(sha256 "$(cat "$STATE/api-key")")"]
agents:
YAML
  for cid in "${CLUSTERS[@]}"; do
    printf '  - clusterId: %s\n    tokenSha256: "%s"\n' "$(cluster "$cid")" "$(sha256 "$(cat "$STATE/token-$cid")")"
    # pinned to the gateway's NodePort on its node; the router signs requests with this cluster's secret
    printf '    gatewayUrls: ["http://%s:%s"]\n' "$(node_ip "$cid")" "$GATEWAY_NODEPORT"
    printf '    gatewayAuth: {mode: hmac, secretFile: /etc/fleetgate/gateway-secrets/%s}\n' "$(cluster "$cid")"
  done
} >"$STATE/router-values.yaml"
log "installing the global router in $(cluster "$ROUTER_CLUSTER")"
helm upgrade --install fleetgate-router "$ROOT/deploy/helm/fleetgate-global-router" \
  --kube-context "$(ctx "$ROUTER_CLUSTER")" -n "$NAMESPACE" -f "$STATE/router-values.yaml" --wait --timeout 5m

for cid in "${CLUSTERS[@]}"; do
  c="$(ctx "$cid")"
  log "model servers and gateway in $(cluster "$cid")"
  kubectl --context "$c" -n "$NAMESPACE" apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: model-server
  labels: {app: fleetgate-sim}
spec:
  replicas: 2
  selector:
    matchLabels: {app: fleetgate-sim}
  template:
    metadata:
      labels:
        app: fleetgate-sim
        inference.networking.k8s.io/engine-type: vllm
    spec:
      automountServiceAccountToken: false
      securityContext: {runAsNonRoot: true, runAsUser: 10001, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: sim
          image: $IMAGE
          imagePullPolicy: Never
          args: [sim, --pods, "1", --base-port, "8000", --host, 0.0.0.0, --model, "$MODEL", --metrics-format, vllm]
          ports: [{name: http, containerPort: 8000}]
          readinessProbe: {httpGet: {path: /health, port: http}, periodSeconds: 2}
          resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 512Mi}}
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
YAML
  kubectl --context "$c" -n "$NAMESPACE" create secret generic fleetgate-agent-token \
    --from-file=token="$STATE/token-$cid" --dry-run=client -o yaml | kubectl --context "$c" apply -f - >/dev/null
  kubectl --context "$c" -n "$NAMESPACE" create secret generic fleetgate-gateway-auth \
    --from-file=secret="$STATE/gateway-secret-$cid" --dry-run=client -o yaml | kubectl --context "$c" apply -f - >/dev/null
  kubectl --context "$c" -n "$NAMESPACE" create secret generic fleetgate-router-ca \
    --from-file=ca.crt="$STATE/capacity-tls.crt" --dry-run=client -o yaml | kubectl --context "$c" apply -f - >/dev/null
  cat >"$STATE/gateway-values-$cid.yaml" <<YAML
replicaCount: 1
podDisruptionBudget: {enabled: false}
image: {repository: ${IMAGE%:*}, tag: ${IMAGE##*:}, pullPolicy: Never}
resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 512Mi}}
service: {type: NodePort, httpPort: 8080, nodePort: $GATEWAY_NODEPORT}
agentToken: {existingSecret: fleetgate-agent-token, key: token}
gatewayAuth: {existingSecret: fleetgate-gateway-auth, key: secret}
routerCa: {existingSecret: fleetgate-router-ca, key: ca.crt}
gateway:
  clusterId: $(cluster "$cid")
  region: ${REGION_OF[$cid]}
  host: 0.0.0.0
  port: 8080
  publicUrl: http://$(node_ip "$cid"):$GATEWAY_NODEPORT
  discovery:
    kubernetes:
      selector: {matchLabels: {app: fleetgate-sim}}
      targetPort: 8000
  extProc: {enabled: false}
  globalRouter:
    address: $router_ip:$ROUTER_GRPC_NODEPORT
    tokenEnv: FLEETGATE_AGENT_TOKEN
    tls: true
YAML
  helm upgrade --install fleetgate-gateway "$ROOT/deploy/helm/fleetgate-cluster-gateway" \
    --kube-context "$c" -n "$NAMESPACE" -f "$STATE/gateway-values-$cid.yaml" --wait --timeout 5m
  kubectl --context "$c" -n "$NAMESPACE" rollout status deploy/model-server --timeout 180s
done

log "waiting for every cluster to report to the global router"
for _ in $(seq 1 60); do
  fleet="$(curl -fsS -H "Authorization: Bearer $(cat "$STATE/admin-key")" \
    "http://127.0.0.1:$ROUTER_HOST_PORT/fleet" 2>/dev/null || true)"
  ok=1
  for cid in "${CLUSTERS[@]}"; do
    grep -q "\"$(cluster "$cid")\"" <<<"$fleet" || ok=0
  done
  if [ "$ok" = 1 ]; then
    log "fleet ready"
    echo "global endpoint: http://127.0.0.1:$ROUTER_HOST_PORT"
    echo "api key file: $STATE/api-key"
    echo "admin key file: $STATE/admin-key (GET /fleet, POST /admin/*)"
    exit 0
  fi
  sleep 2
done
die "not every cluster reported within 120 s; see: kubectl --context $(ctx "$ROUTER_CLUSTER") -n $NAMESPACE logs deploy/fleetgate-router-fleetgate-global-router"
