"""The one exception type of the tokenizers."""

from __future__ import annotations


class TokenizationError(ValueError):
    """A file (or object) could not be tokenised; the message names it and says why."""

    def __init__(self, source: str, reason: str):
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")
