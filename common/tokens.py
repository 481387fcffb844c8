"""One deterministic token-count approximation shared by the simulator, the gateway and the router.

Real tokenizers average ~4 characters per token on English text; using the same rule everywhere
keeps the gateway's prefix blocks, the router's token reservations and the simulator's prefill cost
consistent with each other without shipping a tokenizer.
"""

from __future__ import annotations

CHARS_PER_TOKEN = 4


def count_tokens(text: str) -> int:
    """Approximate token count: ceil(chars / 4), at least 1 for non-empty text."""
    if not text:
        return 0
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
