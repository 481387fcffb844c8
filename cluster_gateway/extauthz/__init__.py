"""Envoy's ext_authz HTTP filter as the endpoint picker: the pick over a keep-alive HTTP check."""
