"""The grammar contract of a token format: one incremental state per sequence, the same methods for all.

``tokenizer.constraint_state()`` returns a fresh :class:`ConstraintState`. Constrained sampling asks it
which tokens keep the sequence valid (``allowed``), feeds it the chosen token (``advance``); decoders skip
the tokens it refuses (``accepts``); evaluations read where the next bar begins (``next_bar_time``).
``remi.grammar.REMIConstraintState`` and ``groove.constraints.GrooveConstraintState`` implement it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from fractions import Fraction

import numpy as np


class ConstraintState(ABC):
    """Where a token sequence is in its format's grammar, updated one token at a time."""

    @abstractmethod
    def allowed(self) -> np.ndarray:
        """``(vocab_size,)`` bool: the tokens that keep the sequence valid after those consumed so far."""

    @abstractmethod
    def accepts(self, token_id: int) -> bool:
        """Whether ``token_id`` may come next (False for an id outside the vocabulary)."""

    @abstractmethod
    def advance(self, token_id: int) -> None:
        """Consume the next token; ValueError if the grammar does not allow it here."""

    @abstractmethod
    def next_bar_time(self) -> Fraction:
        """Beats (quarter notes) from the piece start to the bar line where the next bar begins.

        For a sequence cut at a bar start (``tokenizer.bar_starts``) this is where its continuation
        starts; 0 before any token.
        """
