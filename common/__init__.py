"""Pieces shared by both tiers and the simulator; imports neither tier."""
