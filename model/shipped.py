"""Where the shipped models are: `pretrained/NAME/`, each a checkpoint folder (meta.json, weights).

Found by name here, below both training (which loads them) and generation (which picks the infill
model), so that neither has to import the other to find one.
"""

from __future__ import annotations

from pathlib import Path

PRETRAINED = Path(__file__).resolve().parent.parent / "pretrained"  # the shipped models' folder


def shipped_models() -> dict[str, Path]:
    """{name: folder} of the models shipped in PRETRAINED (empty in a checkout without them)."""
    if not PRETRAINED.is_dir():
        return {}
    return {folder.name: folder for folder in sorted(PRETRAINED.iterdir()) if (folder / "meta.json").is_file()}


def shipped_model(name: str | Path) -> Path | None:
    """The folder of the shipped model called `name`, None when `name` is a path holding a checkpoint or
    no shipped model's name (such a path wins over a name; a folder without one, like the `groove`
    package beside the shipped `groove` model, does not)."""
    path = Path(name)
    if path.is_file() or (path / "meta.json").is_file() or (path / "checkpoints").is_dir():
        return None
    return shipped_models().get(str(name))
