# Three regions, a cluster gateway in each, the global router in "us", one DNS name for clients.

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

locals {
  gateway_urls = {
    us = "http://fleetgate-gateway.fleetgate.svc:8080" # same cluster as the router
    eu = "http://gateway.${var.clusters["eu"].region}.${var.dns.name}:8080"
    ap = "http://gateway.${var.clusters["ap"].region}.${var.dns.name}:8080"
  }
}

module "router" {
  source = "../../modules/global-router"
  providers = {
    helm       = helm.us
    kubernetes = kubernetes.us
  }

  image   = var.image
  region  = var.clusters["us"].region
  redis   = { url = var.redis_url }
  tenants = var.tenants
  agents = {
    for key, c in var.clusters : c.cluster_id => nonsensitive(sha256(random_password.agent_token[key].result))
  }
  gateway_urls    = { for key, c in var.clusters : c.cluster_id => [local.gateway_urls[key]] }
  gateway_secrets = { for key, c in var.clusters : c.cluster_id => random_password.gateway_secret[key].result }
  # TLS for the agents' capacity streams, issued by cert-manager for the name they dial
  capacity_tls = {
    cert_manager_issuer = var.capacity_tls_issuer
    dns_names           = [var.capacity_dns_name]
  }
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

locals {
  gateway_common = {
    for key, c in var.clusters : key => {
      cluster_id = c.cluster_id
      region     = c.region
      discovery  = { match_labels = c.match_labels, target_port = c.target_port }
      capacity   = { cost_per_gpu_hour = c.cost_per_gpu_hour, capacity_type = c.capacity_type }
      router = {
        address        = "${var.capacity_dns_name}:50051"
        token          = random_password.agent_token[key].result
        gateway_secret = random_password.gateway_secret[key].result
        tls            = true
      }
    }
  }
}

module "gateway_us" {
  source    = "../../modules/cluster-gateway"
  providers = { helm = helm.us, kubernetes = kubernetes.us }

  image            = var.image
  cluster_id       = local.gateway_common["us"].cluster_id
  region           = local.gateway_common["us"].region
  discovery        = local.gateway_common["us"].discovery
  capacity         = local.gateway_common["us"].capacity
  global_router    = local.gateway_common["us"].router
  router_ca_secret = var.router_ca_secret
  public_url       = local.gateway_urls["us"]
}

module "gateway_eu" {
  source    = "../../modules/cluster-gateway"
  providers = { helm = helm.eu, kubernetes = kubernetes.eu }

  image            = var.image
  cluster_id       = local.gateway_common["eu"].cluster_id
  region           = local.gateway_common["eu"].region
  discovery        = local.gateway_common["eu"].discovery
  capacity         = local.gateway_common["eu"].capacity
  global_router    = local.gateway_common["eu"].router
  router_ca_secret = var.router_ca_secret
  service          = { type = "LoadBalancer", annotations = var.internal_lb_annotations }
  public_url       = local.gateway_urls["eu"]
}

module "gateway_ap" {
  source    = "../../modules/cluster-gateway"
  providers = { helm = helm.ap, kubernetes = kubernetes.ap }

  image            = var.image
  cluster_id       = local.gateway_common["ap"].cluster_id
  region           = local.gateway_common["ap"].region
  discovery        = local.gateway_common["ap"].discovery
  capacity         = local.gateway_common["ap"].capacity
  global_router    = local.gateway_common["ap"].router
  router_ca_secret = var.router_ca_secret
  service          = { type = "LoadBalancer", annotations = var.internal_lb_annotations }
  public_url       = local.gateway_urls["ap"]
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
  tags              = { Name = "fleetgate-router-${var.clusters["us"].region}" }
}

resource "aws_route53_record" "global" {
  zone_id         = var.dns.zone_id
  name            = var.dns.name
  type            = "CNAME"
  ttl             = var.dns.ttl
  records         = [module.router.endpoint_host]
  set_identifier  = "router-${var.clusters["us"].region}"
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
