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
  description = "What every agent reports to ({address, tls}): the capacity certificate's DNS name at the load balancer's port; null before the router's capacity address is known."
  value       = local.router_link
  precondition {
    condition     = local.router_address == null || length(var.clusters) == 1 || !can(regex("\\.svc(\\.cluster\\.local)?:[0-9]+$", local.router_address))
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

output "router_gateway_urls" {
  description = "cluster_id -> [gateway URL], the global-router module's `gateway_urls` input (each agent pinned to its gateway)."
  value       = local.router_gateway_urls
  precondition {
    condition     = length(setsubtract(keys(var.clusters), keys(var.gateway_urls))) == 0 && length(setsubtract(keys(var.gateway_urls), keys(var.clusters))) == 0
    error_message = "gateway_urls must name every cluster's gateway (and only clusters of the fleet): the router refuses agents whose gateway is not pinned."
  }
  precondition {
    condition     = alltrue([for u in values(var.gateway_urls) : can(regex("^https?://[^/@?#:]+(:[0-9]{1,5})?/?$", u))])
    error_message = "gateway_urls values must be http(s)://host[:port] URLs without user info, path or query (a gateway's load balancer address)."
  }
}

output "router_gateway_secrets" {
  description = "cluster_id -> router->gateway HMAC secret, the global-router module's `gateway_secrets` input."
  value       = local.router_gateway_secrets
  sensitive   = true
  precondition {
    condition     = length(setsubtract(keys(var.clusters), keys(var.gateway_secrets))) == 0 && length(setsubtract(keys(var.gateway_secrets), keys(var.clusters))) == 0
    error_message = "gateway_secrets must hold one secret per cluster (and only clusters of the fleet): a gateway without one would serve requests that bypass the router."
  }
}

output "router_capacity_tls" {
  description = "The global-router module's `capacity_tls` input: TLS on the capacity port, issued by cert-manager for the name agents dial."
  value       = local.router_capacity_tls
  precondition {
    condition     = var.capacity_tls_issuer == "" || (var.router_tls && var.router_capacity_dns_name != null)
    error_message = "capacity_tls_issuer needs router_tls and router_capacity_dns_name (the certificate is issued for the name agents dial)."
  }
}
