output "spec" {
  description = "The FleetgateGateway spec (camelCase), the chart's `gateway` value."
  value       = local.spec
}

output "reports_to_router" {
  description = "Whether this cluster's agent streams capacity reports to a global router."
  value       = var.global_router_address != null
}
