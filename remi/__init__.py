"""REMI tokenization for pop piano (spe_notes.md section 5) with an optional TimeSig extension."""

from remi.grammar import REMIConstraintState
from remi.tokenizer import EncodeStats, REMITokenizer
from remi.vocab import METERS

__all__ = ["EncodeStats", "METERS", "REMIConstraintState", "REMITokenizer"]
