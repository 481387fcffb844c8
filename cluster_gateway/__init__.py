"""Tier 1: the GPU-aware cluster gateway (discovery → metrics → scheduling → proxy)."""
