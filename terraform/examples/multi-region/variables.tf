variable "kubeconfig_path" {
  description = "kubeconfig holding one context per region."
  type        = string
  default     = "~/.kube/config"
}

variable "clusters" {
  description = "The three regional clusters, keyed us/eu/ap: kubeconfig context, fleet identity, the namespace the model servers run in (model_namespace) and GPU cost facts."
  type = map(object({
    kube_context      = string
    cluster_id        = string
    region            = string
    cost_per_gpu_hour = optional(number, 2.5)
    capacity_type     = optional(string, "on-demand")
    match_labels      = optional(map(string), { app = "vllm" })
    target_port       = optional(number, 8000)
    model_namespace   = optional(string, "default")
  }))
  validation {
    condition     = sort(keys(var.clusters)) == tolist(["ap", "eu", "us"])
    error_message = "clusters must have exactly the keys us, eu and ap (one provider alias each)."
  }
  validation {
    condition     = length(distinct([for c in values(var.clusters) : c.cluster_id])) == length(var.clusters)
    error_message = "cluster_id values must be unique."
  }
}

variable "namespace" {
  description = "Namespace of Fleetgate (router and gateways) in every cluster, created once per cluster by this example."
  type        = string
  default     = "fleetgate"
}

variable "image" {
  description = "Fleetgate container image."
  type = object({
    repository = string
    tag        = optional(string, "")
  })
  default = { repository = "ghcr.io/fleetgate/fleetgate" }
}

variable "tenants" {
  description = "API tenants for the global router, keys as SHA-256 hex only."
  type = list(object({
    name                = string
    api_key_sha256      = list(string)
    requests_per_minute = optional(number, 0)
    tokens_per_minute   = optional(number, 0)
    max_concurrency     = optional(number, 0)
    traffic_class       = optional(string, "interactive")
  }))
  default = []
}

variable "redis_url" {
  description = "Redis for the router replicas' shared state (e.g. ElastiCache in the router's region); null: one replica."
  type        = string
  default     = null
  sensitive   = true
}

variable "internal_lb_annotations" {
  description = "Service annotations that make a load balancer internal; used for the gateways and the capacity port. Assumes the AWS Load Balancer Controller (v2.4+; the in-tree controller skips `type: external`); `aws-load-balancer-internal` keeps it internal should the in-tree controller handle it instead."
  type        = map(string)
  default = {
    "service.beta.kubernetes.io/aws-load-balancer-type"            = "external"
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type" = "ip"
    "service.beta.kubernetes.io/aws-load-balancer-scheme"          = "internal"
    "service.beta.kubernetes.io/aws-load-balancer-internal"        = "true"
  }
}

variable "public_lb_annotations" {
  description = "Service annotations of the router's public load balancer (AWS Load Balancer Controller NLB); the example adds the ACM certificate for HTTPS."
  type        = map(string)
  default = {
    "service.beta.kubernetes.io/aws-load-balancer-type"            = "external"
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type" = "ip"
    "service.beta.kubernetes.io/aws-load-balancer-scheme"          = "internet-facing"
  }
}

variable "router_certificate_arn" {
  description = "ACM certificate (covering dns.name) the router's load balancer terminates HTTPS with."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:acm:", var.router_certificate_arn))
    error_message = "router_certificate_arn must be an ACM certificate ARN."
  }
}

variable "capacity_dns_name" {
  description = "DNS name agents dial for the router's capacity port (this example points it at the capacity load balancer); the TLS certificate is issued for it."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$", var.capacity_dns_name))
    error_message = "capacity_dns_name must be a lower-case DNS name (no scheme, no port)."
  }
}

variable "capacity_tls_issuer" {
  description = "cert-manager ClusterIssuer (installed in the router's cluster) that issues the capacity port's certificate."
  type        = string
}

variable "router_ca_secret" {
  description = "Secret (key ca.crt) in each gateway namespace with the CA of that issuer, so agents verify the router; empty for a public CA."
  type        = string
  default     = ""
}

variable "dns" {
  description = "Route 53 record for the global endpoint (latency-routed, health-checked)."
  type = object({
    zone_id    = string
    name       = string
    aws_region = string
    ttl        = optional(number, 60)
  })
  validation {
    condition     = can(regex("^[a-zA-Z0-9.-]+$", var.dns.name)) && var.dns.ttl >= 5
    error_message = "dns.name must be a host name and dns.ttl at least 5 seconds."
  }
}
