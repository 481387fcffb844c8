output "namespaces" {
  description = "Cluster key -> the namespaces Fleetgate creates there (each exactly once)."
  value       = local.namespaces
}

output "router_namespace" {
  description = "Namespace of the global router."
  value       = local.router_namespace
}

output "gateways" {
  description = "Cluster key -> the cluster-gateway module's inputs (identity, discovery in the model namespace, capacity facts, namespace)."
  value       = local.gateways
  precondition {
    condition     = contains(keys(var.clusters), var.router_cluster)
    error_message = "router_cluster must be one of the keys of clusters."
  }
}

output "router_link" {
  description = "What every agent reports to ({address, tls}); null before the router's capacity address is known."
  value       = local.router_link
  precondition {
    condition     = var.router_capacity_address == null || length(var.clusters) == 1 || !can(regex("\\.svc(\\.cluster\\.local)?:[0-9]+$", var.router_capacity_address))
    error_message = "router_capacity_address is a cluster-local .svc name, which agents in other clusters cannot resolve: give the router's capacity Service a load balancer."
  }
}

output "agents" {
  description = "cluster_id -> agent token SHA-256, the global-router module's `agents` input."
  value       = local.agents
  precondition {
    condition     = length(setsubtract(keys(var.agent_token_sha256), keys(var.clusters))) == 0
    error_message = "agent_token_sha256 has keys that are not in clusters."
  }
}
