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
  agents = [for id, hash in var.agents : { clusterId = id, tokenSha256 = hash }]
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
    service         = { type = var.service.type, annotations = var.service.annotations, port = 80 }
    capacityService = { type = var.capacity_service.type, annotations = var.capacity_service.annotations, port = 50051 }
  })], var.extra_values)

  depends_on = [kubernetes_namespace_v1.this, kubernetes_secret_v1.redis]
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
