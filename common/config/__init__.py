"""Config schemas (msgspec structs) and their YAML loader.

The gateway's schema is also the CRD's `spec` (the CRD's OpenAPI schema is generated from it), so a
config file and a `FleetgateGateway` custom resource are interchangeable.
"""

from common.config.loader import ConfigError, load_config, load_config_data

__all__ = ["ConfigError", "load_config", "load_config_data"]
