variable "cluster_id" {
  description = "Unique id of this cluster in the fleet; the global router binds its agent token to it."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.cluster_id))
    error_message = "cluster_id must be a DNS label: lower-case letters, digits and '-', at most 63 characters."
  }
}

variable "region" {
  description = "Region of the cluster (used by the global router's latency model)."
  type        = string
  validation {
    condition     = length(var.region) > 0
    error_message = "region must not be empty."
  }
}

variable "zone" {
  description = "Zone of the cluster, informational."
  type        = string
  default     = ""
}

variable "public_url" {
  description = "How the global router reaches this gateway over HTTP (e.g. an internal load balancer URL); null when no router."
  type        = string
  default     = null
  validation {
    condition     = var.public_url == null || can(regex("^https?://", var.public_url))
    error_message = "public_url must start with http:// or https://."
  }
}

variable "public_host" {
  description = "Host name or IP of this gateway's load balancer (the cluster-gateway module's Service status); builds public_url when public_url is null."
  type        = string
  default     = null
  validation {
    condition     = var.public_host == null || can(regex("^[A-Za-z0-9.-]*$", var.public_host))
    error_message = "public_host must be a host name or IPv4 address (no scheme, no port), or empty while the load balancer has none."
  }
}

variable "public_scheme" {
  description = "Scheme the global router uses for this gateway (https once the gateway serves TLS)."
  type        = string
  default     = "http"
  validation {
    condition     = contains(["http", "https"], var.public_scheme)
    error_message = "public_scheme must be http or https."
  }
}

variable "public_port" {
  description = "Port of this gateway's load balancer."
  type        = number
  default     = 8080
  validation {
    condition     = var.public_port >= 1 && var.public_port <= 65535 && floor(var.public_port) == var.public_port
    error_message = "public_port must be a TCP port (1-65535)."
  }
}

variable "discovery" {
  description = "Where the model-server pods are: an InferencePool by name, or a label selector (exactly one)."
  type = object({
    namespace      = optional(string)
    inference_pool = optional(string)
    match_labels   = optional(map(string), {})
    target_port    = optional(number, 8000)
  })
  validation {
    condition     = (var.discovery.inference_pool != null) != (length(var.discovery.match_labels) > 0)
    error_message = "discovery needs exactly one of inference_pool or match_labels."
  }
  validation {
    condition     = var.discovery.target_port >= 1 && var.discovery.target_port <= 65535
    error_message = "discovery.target_port must be a TCP port (1-65535)."
  }
}

variable "ext_proc_enabled" {
  description = "Serve the Envoy ext_proc endpoint picker (gRPC) next to the embedded proxy."
  type        = bool
  default     = true
}

variable "global_router_address" {
  description = "host:port of the global router's gRPC capacity service; null for a standalone cluster."
  type        = string
  default     = null
  validation {
    condition     = var.global_router_address == null || can(regex("^[^:/ ]+:[0-9]{1,5}$", var.global_router_address))
    error_message = "global_router_address must be host:port."
  }
}

variable "global_router_tls" {
  description = "Use TLS for the capacity stream to the global router (on by default: the agent token crosses regions)."
  type        = bool
  default     = true
}

variable "capacity" {
  description = "Cost and capacity facts the global router uses for cost-aware routing."
  type = object({
    cost_per_gpu_hour = optional(number, 2.5)
    capacity_type     = optional(string, "on-demand")
    gpus_per_pod      = optional(number, 1)
  })
  default = {}
  validation {
    condition     = contains(["on-demand", "spot"], var.capacity.capacity_type)
    error_message = "capacity.capacity_type must be on-demand or spot."
  }
  validation {
    condition     = var.capacity.cost_per_gpu_hour >= 0 && var.capacity.gpus_per_pod >= 1
    error_message = "capacity.cost_per_gpu_hour must be >= 0 and capacity.gpus_per_pod >= 1."
  }
}

variable "extra_spec" {
  description = "More FleetgateGateway spec fields (camelCase, e.g. scheduling, scrape), merged over the generated ones."
  type        = any
  default     = {}
}
