"""The agent's bearer token: from a file (a mounted Secret) or an environment variable.

Errors name the config field and the file or variable, never the token itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from common.config.gateway import GlobalRouterLink
from common.config.loader import ConfigError


def load_agent_token(link: GlobalRouterLink) -> str:
    """`tokenFile` wins when set; otherwise the variable named by `tokenEnv`."""
    if link.token_file is not None:
        path = Path(link.token_file)
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"globalRouter.tokenFile: cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"globalRouter.tokenFile: {path} is not UTF-8 text") from None
        if not token:
            raise ConfigError(f"globalRouter.tokenFile: {path} is empty")
        source = f"globalRouter.tokenFile ({path})"
    else:
        token = os.environ.get(link.token_env, "").strip()
        if not token:
            raise ConfigError(
                f"globalRouter.tokenEnv: environment variable {link.token_env} is not set or empty"
            )
        source = f"globalRouter.tokenEnv ({link.token_env})"
    if any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(f"{source}: the token must be one line of printable characters without spaces")
    return token
