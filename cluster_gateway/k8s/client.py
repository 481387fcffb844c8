"""Builds a `kubernetes` ApiClient from a kubeconfig file or the pod's in-cluster service account."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from common.config.loader import ConfigError

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def load_api_client(kubeconfig: str | None, *, field: str = "kubeconfig") -> client.ApiClient:
    """In-cluster config when `kubeconfig` is None, else that file; a ConfigError names `field` on failure.

    Each caller gets its own ApiClient (own connection pool) so nothing depends on the library's
    process-global default configuration.
    """
    conf = client.Configuration()
    if kubeconfig:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise ConfigError(f"{field}: kubeconfig file {str(path)!r} does not exist")
        try:
            config.load_kube_config(config_file=str(path), client_configuration=conf)
        except (ConfigException, ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"{field}: cannot use kubeconfig {str(path)!r}: {exc}") from None
    else:
        try:
            config.load_incluster_config(client_configuration=conf)
        except ConfigException as exc:
            raise ConfigError(
                f"{field}: not set and not running inside a Kubernetes pod ({exc}); "
                "set it to a kubeconfig file path"
            ) from None
    return client.ApiClient(conf)


def current_namespace(default: str = "default") -> str:
    """The namespace this pod runs in (from its service account), else `default`."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or default
    except OSError:
        return default
