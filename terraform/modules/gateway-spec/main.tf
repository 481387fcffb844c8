# Provider-free: turns typed inputs into a FleetgateGateway spec (camelCase, the chart's `gateway` value).
locals {
  kubernetes = merge(
    { targetPort = var.discovery.target_port },
    var.discovery.namespace == null ? {} : { namespace = var.discovery.namespace },
    var.discovery.inference_pool == null ? {} : { inferencePool = var.discovery.inference_pool },
    length(var.discovery.match_labels) == 0 ? {} : { selector = { matchLabels = var.discovery.match_labels } },
  )

  # An explicit URL wins; else the load balancer's address; else none (standalone, or the router
  # falls back to http://host:port).
  public_url = var.public_url != null ? var.public_url : (
    var.public_host == null || var.public_host == "" ? null : "${var.public_scheme}://${var.public_host}:${var.public_port}"
  )

  router_link = var.global_router_address == null ? {} : {
    globalRouter = {
      address  = var.global_router_address
      tokenEnv = "FLEETGATE_AGENT_TOKEN"
      tls      = var.global_router_tls
    }
  }

  spec = merge(
    {
      clusterId = var.cluster_id
      region    = var.region
      zone      = var.zone
      host      = "0.0.0.0"
      port      = 8080
      discovery = { kubernetes = local.kubernetes }
      extProc   = { enabled = var.ext_proc_enabled, port = 9002 }
      capacity = {
        costPerGpuHour = var.capacity.cost_per_gpu_hour
        capacityType   = var.capacity.capacity_type
        gpusPerPod     = var.capacity.gpus_per_pod
      }
    },
    local.public_url == null ? {} : { publicUrl = local.public_url },
    local.router_link,
    var.extra_spec,
  )
}
