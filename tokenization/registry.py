"""The one tokenizer registry: class name -> class and token format (``remi``, ``groove``) -> class.

Every ``BaseTokenizer`` subclass registers itself under its class name (the name its JSON, a corpus's
``vocab.json`` or a checkpoint's ``meta.json``, records); a format also names itself::

    class REMITokenizer(BaseTokenizer, token_format="remi"): ...

The project's formats live in the packages of :data:`FORMAT_PACKAGES`, imported on the first lookup, so
a fresh process can rebuild any saved tokenizer without importing them first.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenization.base import BaseTokenizer

FORMAT_PACKAGES = {"remi": "remi", "groove": "groove"}  # token format -> the package that registers it

_by_name: dict[str, type[BaseTokenizer]] = {}  # class name -> class
_by_format: dict[str, type[BaseTokenizer]] = {}  # token format -> class


def register(cls: type[BaseTokenizer], token_format: str | None = None) -> None:
    """Record a tokenizer class under its name (and its format); called by ``BaseTokenizer`` subclassing."""
    if token_format is not None:
        known = _by_format.get(token_format)
        if known is not None and known.__qualname__ != cls.__qualname__:
            raise ValueError(f"token format {token_format!r} is already registered by {known.__name__}")
        _by_format[token_format] = cls
    _by_name[cls.__name__] = cls


def token_formats() -> tuple[str, ...]:
    """The token formats a run can be configured with (``data.format``)."""
    _import_formats()
    return tuple(sorted(_by_format))


def format_class(token_format: str) -> type[BaseTokenizer]:
    """The tokenizer class of a token format; ValueError for an unknown format."""
    _import_formats()
    if token_format not in _by_format:
        raise ValueError(f"unknown token format {token_format!r} (known: {', '.join(sorted(_by_format))})")
    return _by_format[token_format]


def format_of(tokenizer: BaseTokenizer) -> str | None:
    """The token format of a tokenizer (None for a class registered without one)."""
    _import_formats()
    return next((name for name, cls in _by_format.items() if type(tokenizer) is cls), None)


def tokenizer_class(name: str) -> type[BaseTokenizer]:
    """The tokenizer class saved under ``name``; ValueError for an unknown name."""
    if name not in _by_name:
        _import_formats()
    if name not in _by_name:
        raise ValueError(f"unknown tokenizer {name!r} (known: {sorted(_by_name)})")
    return _by_name[name]


def tokenizer_from_dict(data: dict[str, Any]) -> BaseTokenizer:
    """Rebuild a tokenizer saved by ``BaseTokenizer.to_dict``; refuses a vocabulary that does not match."""
    name = data.get("tokenizer")
    tokenizer = tokenizer_class(str(name))(**data.get("config", {}))
    if tokenizer.vocab.tokens != list(data.get("vocab", [])):
        raise ValueError(f"saved {name} vocabulary does not match this version's vocabulary")
    return tokenizer


def load_tokenizer(path: str | Path) -> BaseTokenizer:
    """Rebuild a tokenizer from a JSON file written by ``BaseTokenizer.save_vocab``."""
    return tokenizer_from_dict(json.loads(Path(path).read_text()))


def _import_formats() -> None:
    for package in FORMAT_PACKAGES.values():
        importlib.import_module(package)
