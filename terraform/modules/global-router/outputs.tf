output "endpoint" {
  description = "The global OpenAI-compatible endpoint (load balancer address; in-cluster URL when there is none)."
  value       = "${var.service.port == 443 ? "https" : "http"}://${local.http_host != "" ? local.http_host : "${var.release_name}.${var.namespace}.svc"}"
}

output "endpoint_host" {
  description = "Host name or IP of the endpoint's load balancer (for the global DNS record); empty without one."
  value       = local.http_host
}

output "capacity_address" {
  description = "host:port the cluster agents stream capacity reports to."
  value       = "${local.capacity_host}:50051"
}

output "release_name" {
  description = "Helm release name."
  value       = helm_release.this.name
}

output "namespace" {
  description = "Namespace of the router."
  value       = helm_release.this.namespace
}

output "replicas_share_state" {
  description = "Whether replicas share state through Redis (and so autoscale)."
  value       = local.shared_state
}
