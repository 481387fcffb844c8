"""load_agent_token reads the token from a file or env var; errors name the field, never the token."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_gateway.agent.token import load_agent_token
from common.config.gateway import GlobalRouterLink
from common.config.loader import ConfigError

SECRET = "s3cr3t-token-value"


def test_token_file_wins_and_is_stripped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "token"
    f.write_text(SECRET + "\n")
    monkeypatch.setenv("FLEETGATE_AGENT_TOKEN", "from-env")
    assert load_agent_token(GlobalRouterLink(address="x:1", token_file=str(f))) == SECRET


def test_token_from_the_named_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TOKEN", SECRET)
    assert load_agent_token(GlobalRouterLink(address="x:1", token_env="MY_TOKEN")) == SECRET


def test_missing_env_var_names_the_field_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"globalRouter\.tokenEnv.*NOPE_TOKEN"):
        load_agent_token(GlobalRouterLink(address="x:1", token_env="NOPE_TOKEN"))


def test_unreadable_or_empty_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"globalRouter\.tokenFile: cannot read"):
        load_agent_token(GlobalRouterLink(address="x:1", token_file=str(tmp_path / "missing")))
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    with pytest.raises(ConfigError, match=r"globalRouter\.tokenFile: .* is empty"):
        load_agent_token(GlobalRouterLink(address="x:1", token_file=str(empty)))


def test_malformed_token_error_does_not_echo_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETGATE_AGENT_TOKEN", "two words-secret")
    with pytest.raises(ConfigError) as err:
        load_agent_token(GlobalRouterLink(address="x:1"))
    assert "secret" not in str(err.value)
