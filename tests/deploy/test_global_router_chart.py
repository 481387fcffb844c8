"""The global-router chart: values schema from GlobalRouterConfig, hashed-only secrets, HA guard, and the
init container's config assembly run for real on the rendered files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from common.config import load_config
from common.config.router import GlobalRouterConfig
from deploy.gen_crd import outputs
from tests.deploy.charts import ROOT, ROUTER_CHART, RenderError, kinds, lint, notes, one, render

TEMPLATES = {
    "_helpers.tpl",
    "_security.tpl",
    "certificate.yaml",
    "networkpolicy.yaml",
    "NOTES.txt",
    "configmap.yaml",
    "deployment.yaml",
    "hpa.yaml",
    "ingress.yaml",
    "pdb.yaml",
    "redis.yaml",
    "secrets.yaml",
    "service.yaml",
    "serviceaccount.yaml",
    "servicemonitor.yaml",
}
KEY_HASH = hashlib.sha256(b"sk-team-a").hexdigest()
TOKEN_HASH = hashlib.sha256(b"agent-us").hexdigest()
HA_VALUES: dict[str, Any] = {
    "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 6},
    "redis": {"existingSecret": "router-redis", "key": "url"},
    "tenants": [{"name": "team-a", "apiKeySha256": [KEY_HASH], "requestsPerMinute": 600}],
    "agents": [
        {
            "clusterId": "us-east-1",
            "tokenSha256": TOKEN_HASH,
            "gatewayUrls": ["https://gw.us-east-1.internal:8080"],
        }
    ],
}


def _values() -> dict[str, Any]:
    return yaml.safe_load((ROUTER_CHART / "values.yaml").read_text())


def _schema() -> dict[str, Any]:
    return json.loads((ROUTER_CHART / "values.schema.json").read_text())


def test_chart_metadata_and_templates() -> None:
    chart = yaml.safe_load((ROUTER_CHART / "Chart.yaml").read_text())
    assert (chart["apiVersion"], chart["name"], chart["type"]) == ("v2", ROUTER_CHART.name, "application")
    assert chart["version"].count(".") == 2 and chart["appVersion"] and chart["description"]
    assert {p.name for p in (ROUTER_CHART / "templates").iterdir()} == TEMPLATES


def test_values_schema_is_fresh_from_the_router_config() -> None:
    path = ROUTER_CHART / "values.schema.json"
    assert path.read_text() == outputs()[path], "run `python -m deploy.gen_crd`"


def test_default_and_ha_values_validate() -> None:
    validator = jsonschema.Draft7Validator(_schema())
    validator.validate(_values())
    validator.validate({**_values(), **HA_VALUES})


@pytest.mark.parametrize(
    "bad",
    [
        {"tenants": [{"name": "t", "apiKeySha256": ["sk-plaintext-key"]}]},
        {"agents": [{"clusterId": "x", "tokenSha256": "not-a-hash"}]},
        {"config": {"failover": {"maxAttempts": 0}}},
        {"config": {"unknownKnob": True}},
        {"ports": {"http": 0, "grpc": 50051}},
        {"replicas": 3},
        {"autoscalling": {"enabled": True}},
        {"agents": [{"clusterId": "", "tokenSha256": "a" * 64}]},
        {"autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 2}},
        {"resources": {"request": {"cpu": "1"}}},
        {"tolerations": [{"key": "gpu", "operator": "Exits"}]},
        {"redis": {"deploy": {"resources": {"limit": {}}}}},
        {"ingress": {"hosts": [{"host": "h", "paths": [{"path": "/", "pathType": "Prefix", "x": 1}]}]}},
        {"secretReload": {"reloader": True}},
    ],
    ids=[
        "plaintext-key",
        "plaintext-token",
        "failover",
        "unknown",
        "port",
        "top-level-typo",
        "nested-typo",
        "empty-cluster-id",
        "hpa-min-zero",
        "resources-typo",
        "toleration-operator",
        "redis-resources-typo",
        "ingress-path-typo",
        "reload-typo",
    ],
)
def test_bad_values_are_rejected(bad: dict[str, Any]) -> None:
    assert list(jsonschema.Draft7Validator(_schema()).iter_errors({**_values(), **bad}))


def test_chart_lints_clean() -> None:
    assert lint(ROUTER_CHART) == []
    assert lint(ROUTER_CHART, HA_VALUES) == []


def test_default_render_is_a_single_replica_without_redis() -> None:
    docs = render(ROUTER_CHART)
    assert kinds(docs) == sorted(
        [
            "ConfigMap",
            "Deployment",
            "NetworkPolicy",
            "Secret",
            "Secret",
            "Service",
            "Service",
            "ServiceAccount",
        ]
    )
    deploy = one(docs, "Deployment")
    assert deploy["spec"]["replicas"] == 1
    (router,) = deploy["spec"]["template"]["spec"]["containers"]
    assert "--workers" not in router["args"]  # one process: the fleet view and limits are its own


def test_workers_are_passed_whenever_redis_is_configured() -> None:
    """Redis given in the config itself counts too: without the flag the router would count the
    node's cores (`auto`), having no CPU limit to go by."""
    values = {"config": {**_values()["config"], "redis": {"url": "redis://r:6379/0"}}, "workers": 3}
    (router,) = one(render(ROUTER_CHART, values), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert router["args"][-2:] == ["--workers", "3"]
    assert "No Redis" in notes(ROUTER_CHART)


def test_a_pdb_exists_only_when_a_second_replica_does() -> None:
    """`minAvailable: 1` over one pod would block every node drain."""
    assert "PodDisruptionBudget" not in kinds(render(ROUTER_CHART, {"replicaCount": 1}))
    two = {"replicaCount": 2, "redis": {"existingSecret": "r"}}
    assert one(render(ROUTER_CHART, two), "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    one_min = {**HA_VALUES, "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4}}
    assert "PodDisruptionBudget" not in kinds(render(ROUTER_CHART, one_min))


def test_hpa_min_above_max_fails_with_a_clear_message() -> None:
    bad = {**HA_VALUES, "autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 3}}
    with pytest.raises(RenderError, match=r"minReplicas \(5\) must not exceed"):
        render(ROUTER_CHART, bad)


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_trial_redis_and_router_selectors_do_not_overlap() -> None:
    docs = render(ROUTER_CHART, {"replicaCount": 2, "redis": {"deploy": {"enabled": True}}})
    router = one(docs, "Deployment", "global-router")
    redis = one(docs, "Deployment", "-redis")
    router_pod = router["spec"]["template"]["metadata"]["labels"]
    redis_pod = redis["spec"]["template"]["metadata"]["labels"]
    router_selectors = [router["spec"]["selector"]["matchLabels"]]
    router_selectors += [one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]]
    router_selectors += [one(docs, "Service", "global-router")["spec"]["selector"]]
    router_selectors += [one(docs, "Service", "-capacity")["spec"]["selector"]]
    for sel in router_selectors:
        assert _matches(sel, router_pod) and not _matches(sel, redis_pod), sel
    for sel in (redis["spec"]["selector"]["matchLabels"], one(docs, "Service", "-redis")["spec"]["selector"]):
        assert _matches(sel, redis_pod) and not _matches(sel, router_pod), sel
    for obj in (redis, one(docs, "Service", "-redis")):
        text = yaml.safe_dump(obj["metadata"]["labels"]) + yaml.safe_dump(redis_pod)
        assert text.count("app.kubernetes.io/component") == 2  # once per label map
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "redis"


def test_existing_secrets_roll_the_pods_when_they_change() -> None:
    """`helm template` cannot read the cluster (lookup is empty): the annotation is the hash of
    nothing, and it is there so an upgrade against a live cluster changes it after a rotation."""
    values = {"existingTenantsSecret": "t", "existingAgentsSecret": "a"}
    pod_meta = one(render(ROUTER_CHART, values), "Deployment")["spec"]["template"]["metadata"]
    assert len(pod_meta["annotations"]["checksum/existing-secrets"]) == 64
    assert (
        "checksum/existing-secrets"
        not in (one(render(ROUTER_CHART), "Deployment")["spec"]["template"]["metadata"]["annotations"])
    )
    text = (ROUTER_CHART / "templates" / "_helpers.tpl").read_text()
    assert 'lookup "v1" "Secret"' in text
    reloaded = render(
        ROUTER_CHART,
        {**values, "redis": {"existingSecret": "r"}, "secretReload": {"reloaderAnnotation": True}},
    )
    annotations = one(reloaded, "Deployment")["metadata"]["annotations"]
    assert annotations["secret.reloader.stakater.com/reload"] == "t,a,r"


def test_ha_render_has_hpa_pdb_services_and_hardened_pods() -> None:
    docs = render(ROUTER_CHART, HA_VALUES)
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    deploy = one(docs, "Deployment")
    assert "replicas" not in deploy["spec"], "the HPA owns the replica count"
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    http = one(docs, "Service", "global-router")
    capacity = one(docs, "Service", "-capacity")
    assert [p["name"] for p in http["spec"]["ports"]] == ["http"]
    assert [(p["name"], p["port"]) for p in capacity["spec"]["ports"]] == [("grpc-capacity", 50051)]
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["automountServiceAccountToken"] is False
    for c in pod["containers"] + pod["initContainers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] and c["securityContext"]["capabilities"] == {
            "drop": ["ALL"]
        }
    (router,) = pod["containers"]
    # with Redis, serving processes per pod (a number: `auto` would count the node's cores)
    assert router["args"] == ["global-router", "--config", "/run/fleetgate/router.yaml", "--workers", "2"]
    assert router["readinessProbe"]["httpGet"]["path"] == "/ready"  # routable (and Redis seen)
    assert router["livenessProbe"]["httpGet"]["path"] == "/health"
    (init,) = pod["initContainers"]
    (env,) = init["env"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "router-redis", "key": "url"}
    run_volume = next(v for v in pod["volumes"] if v["name"] == "run")
    assert run_volume["emptyDir"]["medium"] == "Memory"


def test_several_replicas_without_redis_fail_with_a_clear_message() -> None:
    with pytest.raises(RenderError, match="shared state"):
        render(ROUTER_CHART, {"replicaCount": 3})


def test_secrets_hold_hashes_only() -> None:
    docs = render(ROUTER_CHART, HA_VALUES)
    secrets = {d["metadata"]["name"]: d["stringData"] for d in docs if d["kind"] == "Secret"}
    tenants = yaml.safe_load(next(v["tenants.yaml"] for v in secrets.values() if "tenants.yaml" in v))
    agents = yaml.safe_load(next(v["agents.yaml"] for v in secrets.values() if "agents.yaml" in v))
    assert tenants[0]["apiKeySha256"] == [KEY_HASH] and agents[0]["tokenSha256"] == TOKEN_HASH
    rendered = json.dumps(docs)
    assert "sk-team-a" not in rendered and "agent-us" not in rendered


def test_existing_secrets_are_used_instead_of_rendered_ones() -> None:
    docs = render(ROUTER_CHART, {"existingTenantsSecret": "t", "existingAgentsSecret": "a"})
    assert "Secret" not in kinds(docs)
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tenants"]["secret"]["secretName"] == "t"
    assert volumes["agents"]["secret"]["secretName"] == "a"


def test_trial_redis_and_ingress() -> None:
    values = {
        "replicaCount": 2,
        "redis": {"deploy": {"enabled": True}},
        "ingress": {"enabled": True, "className": "nginx"},
    }
    docs = render(ROUTER_CHART, values)
    redis = one(docs, "Deployment", "-redis")
    assert redis["spec"]["replicas"] == 1
    assert one(docs, "Service", "-redis")["spec"]["ports"][0]["port"] == 6379
    ingress = one(docs, "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == one(docs, "Service", "global-router")["metadata"]["name"]


def test_init_container_assembles_a_config_the_router_loads(tmp_path: Path) -> None:
    """Run the rendered assemble.py with the rendered ConfigMap and Secrets, as the pod would."""
    docs = render(ROUTER_CHART, HA_VALUES)
    cm = one(docs, "ConfigMap")["data"]
    etc = tmp_path / "etc"
    for sub, name, text in [
        ("base", "router.yaml", cm["router.yaml"]),
        ("base", "assemble.py", cm["assemble.py"]),
        *[
            (key.removesuffix(".yaml"), key, value)
            for d in docs
            if d["kind"] == "Secret"
            for key, value in d["stringData"].items()
        ],
    ]:
        (etc / sub).mkdir(parents=True, exist_ok=True)
        (etc / sub / name).write_text(text)
    out = tmp_path / "router.yaml"
    env = {
        **os.environ,
        "FLEETGATE_CONFIG_DIR": str(etc),
        "FLEETGATE_CONFIG_OUT": str(out),
        "FLEETGATE_REDIS_URL": "redis://redis.example:6379/0",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [sys.executable, str(etc / "base" / "assemble.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 tenants, 1 agents, redis=yes" in proc.stdout
    cfg = load_config(out, GlobalRouterConfig)
    assert (cfg.host, cfg.port, cfg.capacity.host, cfg.capacity.port) == ("0.0.0.0", 8000, "0.0.0.0", 50051)
    assert cfg.redis is not None and cfg.redis.url == "redis://redis.example:6379/0"
    assert [t.name for t in cfg.tenants] == ["team-a"]
    assert [(a.cluster_id, a.token_sha256) for a in cfg.capacity.agents] == [("us-east-1", TOKEN_HASH)]

    # a bad secret makes the init container fail, naming the field, before the router starts
    (etc / "agents" / "agents.yaml").write_text("- clusterId: x\n  tokenSha256: plain\n")
    bad = subprocess.run(
        [sys.executable, str(etc / "base" / "assemble.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "tokenSha256" in bad.stderr
