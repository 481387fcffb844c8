"""Worker processes of one gateway: one control plane, N serving processes (see process.py)."""
