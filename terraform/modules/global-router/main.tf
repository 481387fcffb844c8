locals {
  chart        = coalesce(var.chart, "${path.module}/../../../deploy/helm/fleetgate-global-router")
  redis_secret = "${var.release_name}-redis"
  redis_url    = try(nonsensitive(var.redis.url != null), false)
  redis_given  = try(nonsensitive(var.redis.existing_secret), null)
  redis_trial  = try(nonsensitive(var.redis.deploy_trial), false)
  shared_state = local.redis_url || local.redis_given != null || local.redis_trial

  tenants = [for t in var.tenants : merge(
    {
      name              = t.name
      apiKeySha256      = t.api_key_sha256
      requestsPerMinute = t.requests_per_minute
      tokensPerMinute   = t.tokens_per_minute
      maxConcurrency    = t.max_concurrency
      trafficClass      = t.traffic_class
    },
    t.allowed_models == null ? {} : { allowedModels = t.allowed_models },
  )]
  gateway_secrets_secret = "${var.release_name}-gateway-secrets"
  signs_requests         = length(nonsensitive(keys(var.gateway_secrets))) > 0
  # each agent pinned to its gateway URL(s); the router signs requests to it with the cluster's secret
  agents = [for id, hash in var.agents : merge(
    { clusterId = id, tokenSha256 = hash, gatewayUrls = try(var.gateway_urls[id], []) },
    contains(nonsensitive(keys(var.gateway_secrets)), id) ? {
      gatewayAuth = { mode = "hmac", secretFile = "/etc/fleetgate/gateway-secrets/${id}" }
    } : {},
  )]
}

resource "kubernetes_secret_v1" "gateway_secrets" {
  count = local.signs_requests ? 1 : 0
  metadata {
    name      = local.gateway_secrets_secret
    namespace = var.namespace
  }
  data       = var.gateway_secrets
  depends_on = [kubernetes_namespace_v1.this]
}

resource "kubernetes_namespace_v1" "this" {
  count = var.create_namespace ? 1 : 0
  metadata {
    name   = var.namespace
    labels = { "app.kubernetes.io/part-of" = "fleetgate" }
  }
}

resource "kubernetes_secret_v1" "redis" {
  count = local.redis_url ? 1 : 0
  metadata {
    name      = local.redis_secret
    namespace = var.namespace
  }
  data       = { url = var.redis.url }
  depends_on = [kubernetes_namespace_v1.this]
}

resource "helm_release" "this" {
  name       = var.release_name
  namespace  = var.namespace
  chart      = local.chart
  repository = var.chart_repository
  version    = var.chart_version
  atomic     = true
  wait       = true
  timeout    = 600

  values = concat([yamlencode({
    fullnameOverride = var.release_name
    image            = { repository = var.image.repository, tag = var.image.tag }
    replicaCount     = 1
    autoscaling = {
      enabled                        = local.shared_state
      minReplicas                    = var.autoscaling.min_replicas
      maxReplicas                    = var.autoscaling.max_replicas
      targetCPUUtilizationPercentage = var.autoscaling.target_cpu
    }
    podDisruptionBudget = { enabled = local.shared_state, minAvailable = 1 }
    config              = merge({ region = var.region }, var.extra_config)
    tenants             = local.tenants
    agents              = local.agents
    redis = {
      existingSecret = local.redis_url ? local.redis_secret : coalesce(local.redis_given, "")
      key            = "url"
      deploy         = { enabled = local.redis_trial }
    }
    service        = { type = var.service.type, annotations = var.service.annotations, port = var.service.port }
    gatewaySecrets = { existingSecret = local.signs_requests ? local.gateway_secrets_secret : "" }
    capacityTls = {
      enabled    = var.capacity_tls.enabled
      secretName = var.capacity_tls.secret_name
      certManager = {
        enabled   = var.capacity_tls.cert_manager_issuer != ""
        issuerRef = { name = var.capacity_tls.cert_manager_issuer, kind = var.capacity_tls.cert_manager_issuer_kind, group = "cert-manager.io" }
        dnsNames  = var.capacity_tls.dns_names
      }
    }
    capacityService = { type = var.capacity_service.type, annotations = var.capacity_service.annotations, port = 50051 }
  })], var.extra_values)

  depends_on = [kubernetes_namespace_v1.this, kubernetes_secret_v1.redis, kubernetes_secret_v1.gateway_secrets]

  lifecycle {
    precondition {
      condition     = alltrue([for id in keys(var.agents) : length(try(var.gateway_urls[id], [])) > 0])
      error_message = "every agent needs its gateway pinned: set gateway_urls[cluster id] (a stolen agent token must not redirect traffic)."
    }
  }
}

data "kubernetes_service_v1" "http" {
  metadata {
    name      = var.release_name
    namespace = var.namespace
  }
  depends_on = [helm_release.this]
}

data "kubernetes_service_v1" "capacity" {
  metadata {
    name      = "${var.release_name}-capacity"
    namespace = var.namespace
  }
  depends_on = [helm_release.this]
}

locals {
  http_ingress     = try(data.kubernetes_service_v1.http.status[0].load_balancer[0].ingress[0], {})
  capacity_ingress = try(data.kubernetes_service_v1.capacity.status[0].load_balancer[0].ingress[0], {})
  http_host        = try(coalesce(lookup(local.http_ingress, "hostname", ""), lookup(local.http_ingress, "ip", "")), "")
  capacity_host = try(
    coalesce(lookup(local.capacity_ingress, "hostname", ""), lookup(local.capacity_ingress, "ip", "")),
    "${var.release_name}-capacity.${var.namespace}.svc",
  )
}
