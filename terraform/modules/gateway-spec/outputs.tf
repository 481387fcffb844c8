output "spec" {
  description = "The FleetgateGateway spec (camelCase), the chart's `gateway` value."
  value       = local.spec
}

output "reports_to_router" {
  description = "Whether this cluster's agent streams capacity reports to a global router."
  value       = var.global_router_address != null
}

output "public_url" {
  description = "How the global router reaches this gateway (the spec's publicUrl); null when none."
  value       = local.public_url
}
