"""The exit statuses every command shares (apps/cli.py), and that bugs keep their traceback."""

from __future__ import annotations

import pytest

from apps.cli import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_INTERRUPTED, run_app
from tokenization import TokenizationError


class Declared(Exception):
    """A failure a command declares as expected."""


def raising(error: BaseException):
    def body() -> None:
        raise error
    return body


@pytest.mark.parametrize("error, status", [
    (ValueError("bad --tokens"), EXIT_BAD_INPUT),
    (TokenizationError("song.mid", "not a MIDI file"), EXIT_BAD_INPUT),
    (OSError("disk full"), EXIT_FAILURE),
    (Declared("loss is nan"), EXIT_FAILURE),
])
def test_expected_errors_are_one_line_with_their_status(error, status, capsys):
    assert run_app("spe-x", raising(error), failures=(Declared,)) == status
    err = capsys.readouterr().err.splitlines()
    assert err == [f"spe-x: error: {error}"]


def test_interrupt_and_returned_status(capsys):
    assert run_app("spe-x", raising(KeyboardInterrupt())) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "spe-x: interrupted\n"
    assert run_app("spe-x", lambda: 143) == 143 and run_app("spe-x", lambda: None) == 0


@pytest.mark.parametrize("error", [RuntimeError("shape mismatch"), KeyError("weight"), ImportError("numpy"),
                                   Declared("not declared here")])
def test_bugs_keep_their_traceback(error):
    with pytest.raises(type(error)):
        run_app("spe-x", raising(error))


def test_threads_option_sets_torch_threads_and_refuses_zero():
    import argparse

    import torch

    from apps.cli import set_threads, threads_argument

    parser = argparse.ArgumentParser()
    threads_argument(parser)
    assert parser.parse_args([]).threads == 1
    before = torch.get_num_threads()
    try:
        set_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="--threads"):
        set_threads(0)
