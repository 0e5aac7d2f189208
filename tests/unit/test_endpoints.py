"""Where the controller listens, and who may connect: run alone (a laptop, a CI job)
it serves /metrics and the probes on loopback only; the Deployment binds them on the
pod's addresses, where the kubelet and Prometheus reach them, and the NetworkPolicy
shipped in config/default and config/namespaced lets in Cluster API's manager (the
extension) and labelled monitoring namespaces (metrics) and no other pod."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.app.cli import _parser
from crs_controller.app.runner import RunOptions

CONFIG = Path(__file__).resolve().parents[2] / "config"
Obj = dict[str, Any]


def documents(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def container() -> Obj:
    (manager,) = documents(CONFIG / "manager" / "manager.yaml")
    found: Obj = manager["spec"]["template"]["spec"]["containers"][0]
    return found


def policy() -> Obj:
    (found,) = documents(CONFIG / "network-policy" / "network_policy.yaml")
    return found


def test_run_alone_listens_on_loopback_only() -> None:
    parser, _ = _parser()
    args = parser.parse_args(["run"])
    assert (args.metrics_addr, args.health_addr) == ("127.0.0.1:8080", "127.0.0.1:8081")
    defaults = RunOptions.__dataclass_fields__
    assert defaults["metrics_addr"].default == "127.0.0.1:8080"
    assert defaults["health_addr"].default == "127.0.0.1:8081"


def test_the_deployment_binds_the_ports_its_probes_and_scrape_use() -> None:
    spec = container()
    ports = {p["name"]: p["containerPort"] for p in spec["ports"]}
    assert "--metrics-addr=:8080" in spec["args"] and ports["metrics"] == 8080
    assert "--health-addr=:8081" in spec["args"] and ports["health"] == 8081
    assert spec["livenessProbe"]["httpGet"]["port"] == "health"
    assert spec["readinessProbe"]["httpGet"]["port"] == "health"


@pytest.mark.parametrize("base", ["default", "namespaced"])
def test_the_policy_ships_in_every_install(base: str) -> None:
    kustomization = documents(CONFIG / base / "kustomization.yaml")[0]
    assert "../network-policy" in kustomization["resources"]


def test_the_policy_selects_the_pods_and_opens_only_extension_and_metrics() -> None:
    found = policy()
    labels = documents(CONFIG / "manager" / "manager.yaml")[0]["spec"]["template"]["metadata"]
    assert found["spec"]["podSelector"]["matchLabels"].items() <= labels["labels"].items()
    assert found["spec"]["policyTypes"] == ["Ingress"]
    opened = {
        port["port"]: rule["from"] for rule in found["spec"]["ingress"] for port in rule["ports"]
    }
    assert set(opened) == {"extension", "metrics"}
    assert {p["name"] for p in container()["ports"]} >= set(opened)
    # Every rule names whom it admits: a rule without "from" would admit everyone.
    assert all(sources for sources in opened.values())
    scrape = opened["metrics"][0]["namespaceSelector"]["matchLabels"]
    assert scrape == {"metrics.addons.crs.dev/scrape": "true"}
