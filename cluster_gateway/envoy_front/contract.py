"""The names Envoy and the pickers agree on: headers, the check's path, the metadata namespace.

Each crosses the Envoy hop in both directions (the bootstrap tells Envoy to send or copy it, a
picker reads or sets it), so one definition keeps the two sides from drifting apart.
"""

from __future__ import annotations

# The ext_authz check's path is this + the client's path (Envoy's `http_service.path_prefix`).
CHECK_PREFIX = "/_fleetgate/pick"
# The check's ranked list of pods (`ip:port,ip:port`), for an override_host cluster's retries.
ENDPOINTS_HEADER = "x-fleetgate-endpoints"
# An ext_authz pick's id: set by the check, copied upstream by Envoy, logged back in its access log.
PICK_HEADER = "x-fleetgate-pick"
# The dynamic-metadata namespace where Envoy's load balancer looks for an ext_proc pick.
LB_METADATA_NAMESPACE = "envoy.lb"
