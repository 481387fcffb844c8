"""Envoy ext_proc endpoint picker: Envoy moves the bytes, Fleetgate chooses the pod."""
