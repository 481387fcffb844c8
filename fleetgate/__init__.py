"""The `fleetgate` command: the composition root that may import every tier."""
