output "global_endpoint" {
  description = "The OpenAI-compatible endpoint clients use (base_url = this + /v1)."
  value       = "https://${aws_route53_record.global.fqdn}"
}

output "router_endpoint" {
  description = "The router's own load balancer address."
  value       = module.router.endpoint
}

output "capacity_address" {
  description = "host:port every cluster agent reports to."
  value       = module.router.capacity_address
}

output "gateways" {
  description = "Cluster id -> gateway release, per region."
  value = {
    us = { cluster_id = module.gateway_us.cluster_id, release = module.gateway_us.release_name }
    eu = { cluster_id = module.gateway_eu.cluster_id, release = module.gateway_eu.release_name }
    ap = { cluster_id = module.gateway_ap.cluster_id, release = module.gateway_ap.release_name }
  }
}
