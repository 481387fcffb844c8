"""Tier 1 → Tier 2: the capacity agent that reports this cluster's pool to the global router."""

from cluster_gateway.agent.aggregate import build_report, default_saturation
from cluster_gateway.agent.client import CapacityAgent
from cluster_gateway.agent.service_model import ServiceModel
from cluster_gateway.agent.token import load_agent_token

__all__ = ["CapacityAgent", "ServiceModel", "build_report", "default_saturation", "load_agent_token"]
