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

  # Agents dial the name the capacity certificate is issued for (at the load balancer's port), so
  # TLS verifies the router; without such a name, the load balancer's own address.
  router_address = var.router_capacity_address == null ? null : (
    var.router_capacity_dns_name == null ? var.router_capacity_address :
    "${var.router_capacity_dns_name}:${element(split(":", var.router_capacity_address), 1)}"
  )
  router_link = local.router_address == null ? null : {
    address = local.router_address
    tls     = var.router_tls
  }

  # The router's side of the trust boundary, keyed by cluster id: each agent pinned to its gateway's
  # URL, each gateway's requests signed with that cluster's own secret.
  router_gateway_urls    = { for key, url in var.gateway_urls : var.clusters[key].cluster_id => [url] }
  router_gateway_secrets = { for key, secret in var.gateway_secrets : var.clusters[key].cluster_id => secret }

  router_capacity_tls = {
    enabled             = var.router_tls
    cert_manager_issuer = var.capacity_tls_issuer
    dns_names           = var.router_capacity_dns_name == null ? [] : [var.router_capacity_dns_name]
  }

  agents = {
    for key, hash in var.agent_token_sha256 : var.clusters[key].cluster_id => hash
  }
}
