"""The Groove2Groove 3-track format (bass, drums, accompaniment): tokenizer, augmentation, constrained
decoding, style metrics (``groove.metrics``), dataset loader (``groove.dataset``) and an offline trio
corpus (``groove.trio``)."""

from groove.augment import Augmentation, AugmentedPiece
from groove.constraints import ClosedNote, GrooveConstraintState
from groove.roles import TRACKS, GroovePiece
from groove.tokenizer import GrooveTokenizer

__all__ = ["TRACKS", "Augmentation", "AugmentedPiece", "ClosedNote", "GroovePiece", "GrooveConstraintState",
           "GrooveTokenizer"]
