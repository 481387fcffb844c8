# Three regions, a cluster gateway in each, the global router in "us", one DNS name for clients.

resource "random_password" "agent_token" {
  for_each = var.clusters
  length   = 40
  special  = false
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
  capacity_service = { type = "LoadBalancer", annotations = var.internal_lb_annotations }
}

locals {
  gateway_common = {
    for key, c in var.clusters : key => {
      cluster_id = c.cluster_id
      region     = c.region
      discovery  = { match_labels = c.match_labels, target_port = c.target_port }
      capacity   = { cost_per_gpu_hour = c.cost_per_gpu_hour, capacity_type = c.capacity_type }
      router = {
        address = module.router.capacity_address
        token   = random_password.agent_token[key].result
      }
    }
  }
}

module "gateway_us" {
  source    = "../../modules/cluster-gateway"
  providers = { helm = helm.us, kubernetes = kubernetes.us }

  image         = var.image
  cluster_id    = local.gateway_common["us"].cluster_id
  region        = local.gateway_common["us"].region
  discovery     = local.gateway_common["us"].discovery
  capacity      = local.gateway_common["us"].capacity
  global_router = local.gateway_common["us"].router
  public_url    = "http://fleetgate-gateway.fleetgate.svc:8080" # same cluster as the router
}

module "gateway_eu" {
  source    = "../../modules/cluster-gateway"
  providers = { helm = helm.eu, kubernetes = kubernetes.eu }

  image         = var.image
  cluster_id    = local.gateway_common["eu"].cluster_id
  region        = local.gateway_common["eu"].region
  discovery     = local.gateway_common["eu"].discovery
  capacity      = local.gateway_common["eu"].capacity
  global_router = local.gateway_common["eu"].router
  service       = { type = "LoadBalancer", annotations = var.internal_lb_annotations }
  public_url    = "http://gateway.${var.clusters["eu"].region}.${var.dns.name}:8080"
}

module "gateway_ap" {
  source    = "../../modules/cluster-gateway"
  providers = { helm = helm.ap, kubernetes = kubernetes.ap }

  image         = var.image
  cluster_id    = local.gateway_common["ap"].cluster_id
  region        = local.gateway_common["ap"].region
  discovery     = local.gateway_common["ap"].discovery
  capacity      = local.gateway_common["ap"].capacity
  global_router = local.gateway_common["ap"].router
  service       = { type = "LoadBalancer", annotations = var.internal_lb_annotations }
  public_url    = "http://gateway.${var.clusters["ap"].region}.${var.dns.name}:8080"
}

# The global endpoint: a latency-routed, health-checked Route 53 record on the router's load balancer.
# More router regions later = one more record with its own set_identifier and region.
resource "aws_route53_health_check" "router" {
  fqdn              = module.router.endpoint_host
  port              = 80
  type              = "HTTP"
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
