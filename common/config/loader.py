"""YAML → typed config, with errors that name the offending field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

T = TypeVar("T")

_PATH_RE = re.compile(r" - at `\$(?P<path>[^`]*)`$")


class ConfigError(ValueError):
    """Raised for a config that cannot be used; the message names the source and the field."""


def _field_path(raw: str) -> str:
    return raw.lstrip(".") or "(root)"


def load_config_data(data: Any, schema: type[T], source: str = "config") -> T:
    """Validate already-parsed data (a dict from YAML or a CR's spec) against `schema`."""
    if data is None:
        data = {}
    try:
        return msgspec.convert(data, schema, str_keys=True)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        m = _PATH_RE.search(msg)
        if m:
            field = _field_path(m.group("path"))
            detail = msg[: m.start()]
            raise ConfigError(f"{source}: field `{field}`: {detail}") from None
        raise ConfigError(f"{source}: {msg}") from None


def load_config(path: str | Path, schema: type[T]) -> T:
    """Read a YAML file and validate it; a missing file or bad YAML is a ConfigError too."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}") from None
    if isinstance(data, dict) and "spec" in data and "apiVersion" in data:
        data = data["spec"]  # a whole custom resource: its spec is the config
    return load_config_data(data, schema, source=str(p))
