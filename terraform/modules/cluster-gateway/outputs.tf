output "release_name" {
  description = "Helm release name."
  value       = helm_release.this.name
}

output "namespace" {
  description = "Namespace of the gateway."
  value       = helm_release.this.namespace
}

output "service_name" {
  description = "Service of the gateway (http, and grpc-ext-proc for Envoy)."
  value       = var.release_name
}

output "cluster_id" {
  description = "The cluster id this gateway reports as."
  value       = var.cluster_id
}

output "gateway_spec" {
  description = "The FleetgateGateway spec installed (camelCase)."
  value       = module.spec.spec
}

output "public_host" {
  description = "Host name or IP of the gateway's public Service load balancer (empty without one)."
  value       = var.public_service.enabled ? local.public_host : ""
}

output "public_url" {
  description = "The URL the global router forwards to (the spec's publicUrl); null when none."
  value       = module.spec.public_url
}

output "helm_waits" {
  description = "Whether the Helm release waited for Ready pods (false by default: a gateway is Ready only with a ready model pod)."
  value       = helm_release.this.wait
}
