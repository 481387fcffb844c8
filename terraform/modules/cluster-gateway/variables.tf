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
  description = "Create the namespace. Set false when something else owns it (the multi-region example creates each namespace once, for the router and the gateway that share a cluster)."
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

variable "inference_gateway" {
  description = "Render an Envoy AI Gateway route (Gateway + HTTPRoute or AIGatewayRoute) to an InferencePool picked by this gateway over TLS (needs Envoy Gateway with the AI Gateway extension)."
  type = object({
    enabled            = optional(bool, false)
    route_kind         = optional(string, "HTTPRoute")
    gateway_class_name = optional(string, "eg")
    match_labels       = optional(map(string), { app = "vllm" })
    target_port        = optional(number, 8000)
  })
  default = {}
  validation {
    condition     = contains(["HTTPRoute", "AIGatewayRoute"], var.inference_gateway.route_kind)
    error_message = "inference_gateway.route_kind must be HTTPRoute or AIGatewayRoute."
  }
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
  validation {
    condition     = var.global_router == null || length(try(var.global_router.gateway_secret, "")) >= 32
    error_message = "global_router.gateway_secret must be at least 32 characters (a random_password): the gateway verifies the router's HMAC with it."
  }
}

variable "public_url" {
  description = "How the global router reaches this gateway over HTTP; with global_router, this or public_service (whose load balancer address becomes the URL)."
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

variable "public_service" {
  description = "A Service of its own for the router to reach this gateway (usually an internal LoadBalancer); its address becomes publicUrl unless public_url is set."
  type = object({
    enabled     = optional(bool, false)
    type        = optional(string, "LoadBalancer")
    annotations = optional(map(string), {})
    port        = optional(number, 8080)
    scheme      = optional(string, "http")
  })
  default = {}
  validation {
    condition     = contains(["NodePort", "LoadBalancer"], var.public_service.type)
    error_message = "public_service.type must be LoadBalancer or NodePort."
  }
}

variable "wait_for_ready" {
  description = "Let Helm wait (atomic) until the gateway pods are Ready. A gateway is Ready only with a ready model pod, so keep false unless the models are already running."
  type        = bool
  default     = false
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
