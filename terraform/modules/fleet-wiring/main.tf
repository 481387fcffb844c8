# Provider-free: the fleet's wiring (who owns which namespace, what each gateway reports and to
# where, which agents the router accepts), so the multi-region example only connects outputs.
locals {
  router_namespace = coalesce(var.router_namespace, var.namespace)

  # One owner per namespace: every (cluster, namespace) pair Fleetgate needs, once. The router and
  # the gateway in the router's cluster share a namespace unless router_namespace differs.
  namespaces = {
    for key in keys(var.clusters) : key => distinct(concat(
      [var.namespace],
      key == var.router_cluster ? [local.router_namespace] : [],
    ))
  }

  gateways = {
    for key, c in var.clusters : key => {
      cluster_id = c.cluster_id
      region     = c.region
      zone       = c.zone
      namespace  = var.namespace
      discovery = {
        namespace      = c.model_namespace
        inference_pool = c.inference_pool
        match_labels   = c.inference_pool == null ? c.match_labels : {}
        target_port    = c.target_port
      }
      capacity = { cost_per_gpu_hour = c.cost_per_gpu_hour, capacity_type = c.capacity_type }
    }
  }

  router_link = var.router_capacity_address == null ? null : {
    address = var.router_capacity_address
    tls     = var.router_tls
  }

  agents = {
    for key, hash in var.agent_token_sha256 : var.clusters[key].cluster_id => hash
  }
}
