# Three regions, a cluster gateway in each, the global router in "us", one DNS name for clients.
#
# Wiring (all computed, nothing hand-typed): the fleet-wiring module (provider-free, `terraform
# test`ed) decides namespaces, per-cluster gateway inputs and the router's agent list; each gateway's
# own load balancer address becomes its publicUrl (module output -> agent report -> router); the
# router's capacity load balancer address becomes every agent's globalRouter.address.
#
# Trust boundaries (docs/security.md), wired by the same module: every gateway serves only requests
# the router signed with that cluster's own HMAC secret (random_password.gateway_secret, held by the
# gateway's Secret and the router's gateway-secrets Secret); the router pins each agent to its
# gateway's load balancer URL (a stolen agent token cannot redirect traffic); agents dial the
# capacity port over TLS by the name cert-manager issues its certificate for (capacity_dns_name)
# and verify it against router_ca_secret; clients reach the router over HTTPS (ACM on the NLB).
#
# Cross-region path: the router in "us" dials the eu/ap gateways' internal load balancers (port
# 8080) and their agents dial the router's internal capacity load balancer (port 50051). Internal
# load balancers are reachable across regions only over private networking: VPC peering or a Transit
# Gateway between the three VPCs (non-overlapping CIDRs, routes both ways, security groups that allow
# 8080 from the router VPC and 50051 from the gateway VPCs). The gateway auth and capacity TLS above
# still apply on that private path (docs/deploy.md, "Cross-region path").

locals {
  router_key = "us"
}

resource "random_password" "agent_token" {
  for_each = var.clusters
  length   = 40
  special  = false
}

# The router signs every request to a cluster's gateway with that cluster's own secret; the
# gateway serves nothing else (a request straight to it gets 401).
resource "random_password" "gateway_secret" {
  for_each = var.clusters
  length   = 48
  special  = false
}

module "wiring" {
  source = "../../modules/fleet-wiring"

  clusters = {
    for key, c in var.clusters : key => {
      cluster_id        = c.cluster_id
      region            = c.region
      model_namespace   = c.model_namespace
      match_labels      = c.match_labels
      target_port       = c.target_port
      cost_per_gpu_hour = c.cost_per_gpu_hour
      capacity_type     = c.capacity_type
    }
  }
  router_cluster          = local.router_key
  namespace               = var.namespace
  router_capacity_address = module.router.capacity_address
  # agents dial the name the capacity certificate is issued for, over TLS (the wiring's default)
  router_capacity_dns_name = var.capacity_dns_name
  capacity_tls_issuer      = var.capacity_tls_issuer
  # digests only (never the tokens), so not sensitive
  agent_token_sha256 = { for key, t in random_password.agent_token : key => nonsensitive(sha256(t.result)) }
  # each agent pinned to its gateway's own load balancer URL (the gateway module's output)
  gateway_urls = {
    us = module.gateway_us.public_url
    eu = module.gateway_eu.public_url
    ap = module.gateway_ap.public_url
  }
  gateway_secrets = { for key, p in random_password.gateway_secret : key => p.result }
}

# One owner per namespace: the router and the us gateway share "fleetgate" in the us cluster; no
# module creates a namespace (create_namespace = false everywhere).
resource "kubernetes_namespace_v1" "us" {
  provider = kubernetes.us
  for_each = toset(module.wiring.namespaces["us"])
  metadata {
    name   = each.key
    labels = { "app.kubernetes.io/part-of" = "fleetgate" }
  }
}

resource "kubernetes_namespace_v1" "eu" {
  provider = kubernetes.eu
  for_each = toset(module.wiring.namespaces["eu"])
  metadata {
    name   = each.key
    labels = { "app.kubernetes.io/part-of" = "fleetgate" }
  }
}

resource "kubernetes_namespace_v1" "ap" {
  provider = kubernetes.ap
  for_each = toset(module.wiring.namespaces["ap"])
  metadata {
    name   = each.key
    labels = { "app.kubernetes.io/part-of" = "fleetgate" }
  }
}

module "router" {
  source = "../../modules/global-router"
  providers = {
    helm       = helm.us
    kubernetes = kubernetes.us
  }

  namespace        = kubernetes_namespace_v1.us[module.wiring.router_namespace].metadata[0].name
  create_namespace = false
  image            = var.image
  region           = var.clusters[local.router_key].region
  redis            = { url = var.redis_url }
  tenants          = var.tenants
  agents           = module.wiring.agents
  gateway_urls     = module.wiring.router_gateway_urls
  gateway_secrets  = module.wiring.router_gateway_secrets
  # TLS for the agents' capacity streams, issued by cert-manager for the name they dial
  capacity_tls     = module.wiring.router_capacity_tls
  capacity_service = { type = "LoadBalancer", annotations = var.internal_lb_annotations }
  # HTTPS for clients: the NLB terminates TLS with an ACM certificate and forwards to the router
  service = {
    type = "LoadBalancer"
    port = 443
    annotations = merge(var.public_lb_annotations, {
      "service.beta.kubernetes.io/aws-load-balancer-ssl-cert"  = var.router_certificate_arn
      "service.beta.kubernetes.io/aws-load-balancer-ssl-ports" = "443"
    })
  }
}

module "gateway_us" {
  source    = "../../modules/cluster-gateway"
  providers = { helm = helm.us, kubernetes = kubernetes.us }

  namespace        = kubernetes_namespace_v1.us[module.wiring.gateways["us"].namespace].metadata[0].name
  create_namespace = false
  image            = var.image
  cluster_id       = module.wiring.gateways["us"].cluster_id
  region           = module.wiring.gateways["us"].region
  discovery        = module.wiring.gateways["us"].discovery
  capacity         = module.wiring.gateways["us"].capacity
  global_router = merge(module.wiring.router_link, {
    token          = random_password.agent_token["us"].result
    gateway_secret = random_password.gateway_secret["us"].result
  })
  router_ca_secret = var.router_ca_secret
  public_service   = { enabled = true, type = "LoadBalancer", annotations = var.internal_lb_annotations }
}

module "gateway_eu" {
  source    = "../../modules/cluster-gateway"
  providers = { helm = helm.eu, kubernetes = kubernetes.eu }

  namespace        = kubernetes_namespace_v1.eu[module.wiring.gateways["eu"].namespace].metadata[0].name
  create_namespace = false
  image            = var.image
  cluster_id       = module.wiring.gateways["eu"].cluster_id
  region           = module.wiring.gateways["eu"].region
  discovery        = module.wiring.gateways["eu"].discovery
  capacity         = module.wiring.gateways["eu"].capacity
  global_router = merge(module.wiring.router_link, {
    token          = random_password.agent_token["eu"].result
    gateway_secret = random_password.gateway_secret["eu"].result
  })
  router_ca_secret = var.router_ca_secret
  public_service   = { enabled = true, type = "LoadBalancer", annotations = var.internal_lb_annotations }
}

module "gateway_ap" {
  source    = "../../modules/cluster-gateway"
  providers = { helm = helm.ap, kubernetes = kubernetes.ap }

  namespace        = kubernetes_namespace_v1.ap[module.wiring.gateways["ap"].namespace].metadata[0].name
  create_namespace = false
  image            = var.image
  cluster_id       = module.wiring.gateways["ap"].cluster_id
  region           = module.wiring.gateways["ap"].region
  discovery        = module.wiring.gateways["ap"].discovery
  capacity         = module.wiring.gateways["ap"].capacity
  global_router = merge(module.wiring.router_link, {
    token          = random_password.agent_token["ap"].result
    gateway_secret = random_password.gateway_secret["ap"].result
  })
  router_ca_secret = var.router_ca_secret
  public_service   = { enabled = true, type = "LoadBalancer", annotations = var.internal_lb_annotations }
}

# The global endpoint: a latency-routed, health-checked Route 53 record on the router's load balancer.
# More router regions later = one more record with its own set_identifier and region.
resource "aws_route53_health_check" "router" {
  fqdn              = module.router.endpoint_host
  port              = 443
  type              = "HTTPS"
  resource_path     = "/health"
  failure_threshold = 3
  request_interval  = 10
  tags              = { Name = "fleetgate-router-${var.clusters[local.router_key].region}" }
}

resource "aws_route53_record" "global" {
  zone_id         = var.dns.zone_id
  name            = var.dns.name
  type            = "CNAME"
  ttl             = var.dns.ttl
  records         = [module.router.endpoint_host]
  set_identifier  = "router-${var.clusters[local.router_key].region}"
  health_check_id = aws_route53_health_check.router.id

  latency_routing_policy {
    region = var.dns.aws_region
  }
}

# The name agents dial for the capacity port (the capacity certificate is issued for it).
resource "aws_route53_record" "capacity" {
  zone_id = var.dns.zone_id
  name    = var.capacity_dns_name
  type    = "CNAME"
  ttl     = var.dns.ttl
  records = [split(":", module.router.capacity_address)[0]]
}
