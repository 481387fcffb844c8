"""Capacity protocol (generated code lives in fleetgate/v1)."""
