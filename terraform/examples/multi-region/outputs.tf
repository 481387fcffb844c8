output "global_endpoint" {
  description = "The OpenAI-compatible endpoint clients use (base_url = this + /v1)."
  value       = "https://${aws_route53_record.global.fqdn}"
}

output "router_endpoint" {
  description = "The router's own load balancer address."
  value       = module.router.endpoint
}

output "capacity_address" {
  description = "host:port every cluster agent reports to (the router's capacity load balancer)."
  value       = module.router.capacity_address
}

output "gateways" {
  description = "Per region: cluster id, release and the URL the router forwards to (the gateway's load balancer)."
  value = {
    us = { cluster_id = module.gateway_us.cluster_id, release = module.gateway_us.release_name, public_url = module.gateway_us.public_url }
    eu = { cluster_id = module.gateway_eu.cluster_id, release = module.gateway_eu.release_name, public_url = module.gateway_eu.public_url }
    ap = { cluster_id = module.gateway_ap.cluster_id, release = module.gateway_ap.release_name, public_url = module.gateway_ap.public_url }
  }
}
