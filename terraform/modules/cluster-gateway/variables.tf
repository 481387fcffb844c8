variable "release_name" {
  description = "Helm release name of the gateway."
  type        = string
  default     = "fleetgate-gateway"
}

variable "namespace" {
  description = "Namespace the gateway is installed into (created when create_namespace is true)."
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
  description = "Chart version to install from chart_repository (null: latest / local)."
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

variable "replicas" {
  description = "Gateway replicas (HA)."
  type        = number
  default     = 2
  validation {
    condition     = var.replicas >= 1 && floor(var.replicas) == var.replicas
    error_message = "replicas must be a whole number >= 1."
  }
}

variable "cluster_id" {
  description = "Unique id of this cluster in the fleet (a DNS label)."
  type        = string
}

variable "region" {
  description = "Region of this cluster."
  type        = string
}

variable "zone" {
  description = "Zone of this cluster, informational."
  type        = string
  default     = ""
}

variable "discovery" {
  description = "Model-server pods: an InferencePool by name or a label selector (exactly one)."
  type = object({
    namespace      = optional(string)
    inference_pool = optional(string)
    match_labels   = optional(map(string), {})
    target_port    = optional(number, 8000)
  })
}

variable "ext_proc_enabled" {
  description = "Serve the Envoy ext_proc endpoint picker."
  type        = bool
  default     = true
}

variable "envoy_gateway" {
  description = "Render an Envoy Gateway Gateway + HTTPRoute to an InferencePool picked by this gateway (needs Envoy Gateway installed)."
  type = object({
    enabled            = optional(bool, false)
    gateway_class_name = optional(string, "eg")
    match_labels       = optional(map(string), { app = "vllm" })
    target_port        = optional(number, 8000)
  })
  default = {}
}

variable "global_router" {
  description = "The global router this cluster reports to: capacity address host:port, this cluster's agent token, and the router->gateway HMAC secret the router signs requests with; null for standalone."
  type = object({
    address        = string
    token          = string
    gateway_secret = string
    tls            = optional(bool, true)
  })
  default   = null
  sensitive = true
}

variable "public_url" {
  description = "How the global router reaches this gateway over HTTP; required with global_router."
  type        = string
  default     = null
}

variable "service" {
  description = "Service in front of the gateway (LoadBalancer with internal annotations for a multi-region fleet)."
  type = object({
    type        = optional(string, "ClusterIP")
    annotations = optional(map(string), {})
  })
  default = {}
  validation {
    condition     = contains(["ClusterIP", "NodePort", "LoadBalancer"], var.service.type)
    error_message = "service.type must be ClusterIP, NodePort or LoadBalancer."
  }
}

variable "capacity" {
  description = "Cost and capacity facts for cost-aware global routing."
  type = object({
    cost_per_gpu_hour = optional(number, 2.5)
    capacity_type     = optional(string, "on-demand")
    gpus_per_pod      = optional(number, 1)
  })
  default = {}
}

variable "extra_spec" {
  description = "More FleetgateGateway spec fields (camelCase), merged over the generated ones."
  type        = any
  default     = {}
}

variable "extra_values" {
  description = "More chart values as YAML documents, applied after the module's own."
  type        = list(string)
  default     = []
}

variable "router_ca_secret" {
  description = "Name of a Secret (key ca.crt) with the CA that signed the router's capacity certificate; empty for a publicly trusted certificate."
  type        = string
  default     = ""
}
