"""What the gateway and an Envoy in front of it share, whichever picker Envoy asks.

Both pickers (`extproc/`, the Inference Extension's gRPC protocol, and `extauthz/`, the HTTP check)
meet Envoy through the same parts: the header names and paths of the contract, the token Envoy
proves itself with, the access log that tells the gateway how each request ended, TLS on the
picker's gRPC port, and the bootstrap that wires Envoy to either picker. They live here so the two
pickers depend on this package and never on each other.
"""
