"""Pod metrics: per-engine mappings of `/metrics` bodies and the scraper that keeps the pool fresh."""
