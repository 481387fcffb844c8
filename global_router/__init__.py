"""Tier 2: the global router (reports → fleet view → selection → forwarding)."""
