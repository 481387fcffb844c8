locals {
  chart            = coalesce(var.chart, "${path.module}/../../../deploy/helm/fleetgate-cluster-gateway")
  token_secret     = "${var.release_name}-agent-token"
  router_address   = try(nonsensitive(var.global_router.address), null)
  router_tls       = try(nonsensitive(var.global_router.tls), true)
  auth_secret      = "${var.release_name}-gateway-auth"
  reports_to_route = local.router_address != null

  # The chart's pod selector (fullnameOverride = release_name, no nameOverride).
  pod_selector = {
    "app.kubernetes.io/name"     = "fleetgate-cluster-gateway"
    "app.kubernetes.io/instance" = var.release_name
  }
  public_ingress = try(kubernetes_service_v1.public[0].status[0].load_balancer[0].ingress[0], {})
  public_host    = try(coalesce(lookup(local.public_ingress, "hostname", ""), lookup(local.public_ingress, "ip", "")), "")
}

# The address the global router uses for this gateway. Created before the release (and waited for
# until the cloud gives it an address, which needs no running pod), so its host name can go into the
# gateway's own publicUrl: the agent reports it, the router forwards there.
resource "kubernetes_service_v1" "public" {
  count = var.public_service.enabled ? 1 : 0
  metadata {
    name        = "${var.release_name}-public"
    namespace   = var.namespace
    annotations = var.public_service.annotations
    labels      = { "app.kubernetes.io/part-of" = "fleetgate" }
  }
  spec {
    type     = var.public_service.type
    selector = local.pod_selector
    port {
      name        = "http"
      port        = var.public_service.port
      target_port = "http"
      protocol    = "TCP"
    }
  }
  wait_for_load_balancer = var.public_service.type == "LoadBalancer"
  depends_on             = [kubernetes_namespace_v1.this]
}

module "spec" {
  source = "../gateway-spec"

  cluster_id            = var.cluster_id
  region                = var.region
  zone                  = var.zone
  public_url            = var.public_url
  public_host           = var.public_service.enabled ? local.public_host : null
  public_scheme         = var.public_service.scheme
  public_port           = var.public_service.port
  discovery             = var.discovery
  ext_proc_enabled      = var.ext_proc_enabled || var.inference_gateway.enabled
  global_router_address = local.router_address
  global_router_tls     = local.router_tls
  capacity              = var.capacity
  extra_spec            = var.extra_spec
}

resource "kubernetes_namespace_v1" "this" {
  count = var.create_namespace ? 1 : 0
  metadata {
    name   = var.namespace
    labels = { "app.kubernetes.io/part-of" = "fleetgate" }
  }
}

# The agent token lives only in this Secret (and in state: keep the state backend encrypted).
resource "kubernetes_secret_v1" "agent_token" {
  count = local.reports_to_route ? 1 : 0
  metadata {
    name      = local.token_secret
    namespace = var.namespace
  }
  data       = { token = var.global_router.token }
  depends_on = [kubernetes_namespace_v1.this]
}

# The router -> gateway HMAC secret of this cluster (the router holds the same one): with it the
# gateway serves only requests the global router signed (docs/security.md).
resource "kubernetes_secret_v1" "gateway_auth" {
  count = local.reports_to_route ? 1 : 0
  metadata {
    name      = local.auth_secret
    namespace = var.namespace
  }
  data       = { secret = var.global_router.gateway_secret }
  depends_on = [kubernetes_namespace_v1.this]
}

resource "helm_release" "this" {
  name             = var.release_name
  namespace        = var.namespace
  chart            = local.chart
  repository       = var.chart_repository
  version          = var.chart_version
  create_namespace = false
  # A gateway is Ready only once a model pod is (/ready is 503 before): waiting here would time out
  # and roll back a fresh cluster whose models are not deployed yet. Opt in with wait_for_ready.
  atomic  = var.wait_for_ready
  wait    = var.wait_for_ready
  timeout = 600

  values = concat([yamlencode({
    fullnameOverride = var.release_name
    image            = { repository = var.image.repository, tag = var.image.tag }
    replicaCount     = var.replicas
    gateway          = module.spec.spec
    agentToken       = { existingSecret = local.reports_to_route ? local.token_secret : "", key = "token" }
    gatewayAuth      = { existingSecret = local.reports_to_route ? local.auth_secret : "", key = "secret" }
    routerCa         = { existingSecret = var.router_ca_secret, key = "ca.crt" }
    service          = { type = var.service.type, annotations = var.service.annotations }
    inferenceGateway = {
      enabled   = var.inference_gateway.enabled
      routeKind = var.inference_gateway.route_kind
      gateway   = { className = var.inference_gateway.gateway_class_name }
      inferencePool = {
        matchLabels = var.inference_gateway.match_labels
        targetPort  = var.inference_gateway.target_port
      }
    }
  })], var.extra_values)

  depends_on = [
    kubernetes_namespace_v1.this,
    kubernetes_secret_v1.agent_token,
    kubernetes_secret_v1.gateway_auth,
    kubernetes_service_v1.public,
  ]
}
