"""Kubernetes plumbing for the cluster gateway: API client loading, resumable list+watch, the
`FleetgateGateway` custom resource as a config source, and its status subresource."""
