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
