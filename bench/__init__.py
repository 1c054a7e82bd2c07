"""Benchmarks and studies; run each as `python -m bench.NAME` from the repository root."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def checked_corpus(corpus: str | None, ckpt: Any) -> Any:
    """The token corpus `corpus` (None: the checkpoint's data.root) in the checkpoint's vocabulary; a
    one-line SystemExit when it is missing or written in another vocabulary."""
    from data import corpus_for
    from data.build import corpus_built

    root = Path(corpus or ckpt.config.data.root)
    if not corpus_built(root):
        raise SystemExit(f"no token corpus in {root}: build it by training or as the model card says, or "
                         f"pass --corpus")
    try:
        return corpus_for(root, ckpt.tokenizer)
    except ValueError as error:
        raise SystemExit(str(error)) from None


def save_figure(fig: Any, path: str | Path, dpi: int = 110) -> None:
    """Lay out a matplotlib figure, write it to `path` (its folder created) and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
