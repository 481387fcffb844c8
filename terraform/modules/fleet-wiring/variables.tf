variable "clusters" {
  description = "The fleet's clusters by key (one kubeconfig context / provider alias each): identity, where the model servers run, and cost facts."
  type = map(object({
    cluster_id        = string
    region            = string
    zone              = optional(string, "")
    model_namespace   = optional(string, "default")
    match_labels      = optional(map(string), { app = "vllm" })
    inference_pool    = optional(string)
    target_port       = optional(number, 8000)
    cost_per_gpu_hour = optional(number, 2.5)
    capacity_type     = optional(string, "on-demand")
  }))
  validation {
    condition     = length(distinct([for c in values(var.clusters) : c.cluster_id])) == length(var.clusters)
    error_message = "cluster_id values must be unique across the fleet (the router binds one agent token to each)."
  }
  validation {
    condition     = alltrue([for c in values(var.clusters) : can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", c.model_namespace))])
    error_message = "model_namespace must be a Kubernetes namespace name (a DNS label)."
  }
}

variable "router_cluster" {
  description = "Key in clusters of the cluster that runs the global router."
  type        = string
}

variable "namespace" {
  description = "Namespace of the cluster gateways (in every cluster) and, unless router_namespace is set, of the router."
  type        = string
  default     = "fleetgate"
}

variable "router_namespace" {
  description = "Namespace of the global router in router_cluster; null: the same as namespace."
  type        = string
  default     = null
}

variable "router_capacity_address" {
  description = "host:port of the router's capacity (gRPC) load balancer, from the global-router module's output; null before the router exists."
  type        = string
  default     = null
  validation {
    condition     = var.router_capacity_address == null || can(regex("^[^:/ ]+:[0-9]{1,5}$", var.router_capacity_address))
    error_message = "router_capacity_address must be host:port."
  }
}

variable "router_capacity_dns_name" {
  description = "DNS name the router's capacity certificate is issued for (a record on its capacity load balancer); agents dial it so TLS can verify the router. null: agents dial router_capacity_address as is."
  type        = string
  default     = null
  validation {
    condition     = var.router_capacity_dns_name == null || can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$", var.router_capacity_dns_name))
    error_message = "router_capacity_dns_name must be a lower-case DNS name with at least two labels (no port, no scheme)."
  }
}

variable "router_tls" {
  description = "Agents use TLS for the capacity stream and verify the router (the agent token crosses regions): on unless set false."
  type        = bool
  default     = true
}

variable "capacity_tls_issuer" {
  description = "cert-manager issuer (in the router's cluster) that issues the capacity certificate for router_capacity_dns_name; empty: the capacity TLS Secret is provided otherwise."
  type        = string
  default     = ""
}

variable "gateway_urls" {
  description = "Cluster key -> the URL the router forwards that cluster's requests to (the gateway module's public_url output). The router pins each agent to it: a report naming any other URL is refused."
  type        = map(string)
  default     = {}
}

variable "gateway_secrets" {
  description = "Cluster key -> the router->gateway HMAC secret of that cluster (its gateway verifies every request with it; the router signs with it). Every cluster needs one."
  type        = map(string)
  sensitive   = true
  validation {
    condition     = alltrue([for s in values(var.gateway_secrets) : length(s) >= 32])
    error_message = "gateway_secrets values must be at least 32 characters (random_password, length >= 32)."
  }
}

variable "agent_token_sha256" {
  description = "Cluster key -> SHA-256 hex of that cluster's agent token."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for h in values(var.agent_token_sha256) : can(regex("^[0-9a-f]{64}$", h))])
    error_message = "agent_token_sha256 values must be SHA-256 hex digests, never raw tokens."
  }
}
