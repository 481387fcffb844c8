variable "release_name" {
  description = "Helm release name (also the name of the router's Services)."
  type        = string
  default     = "fleetgate-router"
}

variable "namespace" {
  description = "Namespace the router is installed into."
  type        = string
  default     = "fleetgate"
}

variable "create_namespace" {
  description = "Create the namespace if it does not exist."
  type        = bool
  default     = true
}

variable "chart" {
  description = "Chart path or name; defaults to the chart in this repository."
  type        = string
  default     = null
}

variable "chart_repository" {
  description = "Helm repository URL when `chart` is a chart name (null for a local path)."
  type        = string
  default     = null
}

variable "chart_version" {
  description = "Chart version to install from chart_repository."
  type        = string
  default     = null
}

variable "image" {
  description = "Container image of Fleetgate."
  type = object({
    repository = string
    tag        = optional(string, "")
  })
  default = { repository = "ghcr.io/fleetgate/fleetgate" }
}

variable "region" {
  description = "Region the router runs in (client-region default for latency scoring)."
  type        = string
  default     = "global"
}

variable "autoscaling" {
  description = "Replica bounds; more than one replica needs Redis."
  type = object({
    min_replicas = optional(number, 2)
    max_replicas = optional(number, 10)
    target_cpu   = optional(number, 70)
  })
  default = {}
  validation {
    condition     = var.autoscaling.min_replicas >= 1 && var.autoscaling.max_replicas >= var.autoscaling.min_replicas
    error_message = "autoscaling needs 1 <= min_replicas <= max_replicas."
  }
}

variable "redis" {
  description = "Shared state for several replicas: a Redis URL (stored in a Secret), an existing Secret with key `url`, or a trial in-cluster Redis. All null/false: one replica, state in process."
  type = object({
    url             = optional(string)
    existing_secret = optional(string)
    deploy_trial    = optional(bool, false)
  })
  default   = {}
  sensitive = true
  validation {
    condition     = length([for x in [var.redis.url != null, var.redis.existing_secret != null, var.redis.deploy_trial] : x if x]) <= 1
    error_message = "set at most one of redis.url, redis.existing_secret, redis.deploy_trial."
  }
}

variable "agents" {
  description = "Cluster id -> SHA-256 hex of that cluster's agent token (a cluster can report only for itself)."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for h in values(var.agents) : can(regex("^[0-9a-f]{64}$", h))])
    error_message = "agents values must be SHA-256 hex digests (64 lower-case hex characters), never raw tokens."
  }
}

variable "tenants" {
  description = "API tenants; keys as SHA-256 hex only (`fleetgate global-router --hash-key KEY`)."
  type = list(object({
    name                = string
    api_key_sha256      = list(string)
    requests_per_minute = optional(number, 0)
    tokens_per_minute   = optional(number, 0)
    max_concurrency     = optional(number, 0)
    allowed_models      = optional(list(string))
    traffic_class       = optional(string, "interactive")
  }))
  default = []
  validation {
    condition     = alltrue(flatten([for t in var.tenants : [for h in t.api_key_sha256 : can(regex("^[0-9a-f]{64}$", h))]]))
    error_message = "tenants[].api_key_sha256 must be SHA-256 hex digests, never raw keys."
  }
  validation {
    condition     = alltrue([for t in var.tenants : contains(["interactive", "batch"], t.traffic_class)])
    error_message = "tenants[].traffic_class must be interactive or batch."
  }
}

variable "service" {
  description = "Service of the OpenAI-compatible endpoint (LoadBalancer to put the global DNS record on it); port 443 with TLS-terminating annotations for HTTPS."
  type = object({
    type        = optional(string, "LoadBalancer")
    annotations = optional(map(string), {})
    port        = optional(number, 80)
  })
  default = {}
}

variable "capacity_service" {
  description = "Service of the gRPC capacity port that agents in every region connect to (usually an internal LoadBalancer)."
  type = object({
    type        = optional(string, "LoadBalancer")
    annotations = optional(map(string), {})
  })
  default = {}
}

variable "extra_config" {
  description = "More router config fields (GlobalRouterConfig, camelCase: selection, failover, rateLimits...)."
  type        = any
  default     = {}
}

variable "extra_values" {
  description = "More chart values as YAML documents, applied after the module's own."
  type        = list(string)
  default     = []
}

variable "gateway_urls" {
  description = "Cluster id -> the gateway URL(s) its capacity reports may name (pinned: any other URL is refused). Every agent needs one."
  type        = map(list(string))
  default     = {}
  validation {
    condition     = alltrue([for urls in values(var.gateway_urls) : length(urls) > 0 && alltrue([for u in urls : can(regex("^https?://[^/@?#]+", u))])])
    error_message = "gateway_urls values must be non-empty lists of http(s) URLs without user info."
  }
}

variable "gateway_secrets" {
  description = "Cluster id -> the router->gateway HMAC secret the router signs that cluster's requests with (its gateway holds the same)."
  type        = map(string)
  default     = {}
  sensitive   = true
}

variable "capacity_tls" {
  description = "TLS on the agents' capacity port: a kubernetes.io/tls Secret (secret_name, default <release>-capacity-tls), issued by cert-manager when cert_manager_issuer is set."
  type = object({
    enabled                  = optional(bool, true)
    secret_name              = optional(string, "")
    cert_manager_issuer      = optional(string, "")
    cert_manager_issuer_kind = optional(string, "ClusterIssuer")
    dns_names                = optional(list(string), [])
  })
  default = {}
}
