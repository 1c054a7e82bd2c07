"""tokenization.registry and the format contract every registered format fulfils."""

import json
import subprocess
import sys
from fractions import Fraction

import pytest

from groove import GrooveTokenizer
from remi import REMITokenizer
from tokenization import (BaseTokenizer, ConstraintState, format_class, format_of, token_formats,
                          tokenizer_from_dict)
from tokenization.registry import tokenizer_class


def test_formats_and_names_map_to_classes():
    assert token_formats() == ("groove", "remi")
    assert format_class("remi") is REMITokenizer and format_class("groove") is GrooveTokenizer
    assert format_of(REMITokenizer(time_signatures=False)) == "remi" and format_of(GrooveTokenizer()) == "groove"
    assert tokenizer_class("REMITokenizer") is REMITokenizer
    with pytest.raises(ValueError, match="unknown token format 'midi'.*groove, remi"):
        format_class("midi")


def test_a_format_name_is_registered_once():
    with pytest.raises(ValueError, match="already registered by REMITokenizer"):
        type("OtherREMI", (REMITokenizer,), {}, token_format="remi")


def test_saved_tokenizers_load_in_a_fresh_process(tmp_path):
    """Neither remi nor groove imported beforehand: the registry imports the formats itself."""
    for tokenizer in (REMITokenizer(time_signatures=False), GrooveTokenizer()):
        path = tmp_path / f"{type(tokenizer).__name__}.json"
        tokenizer.save_vocab(path)
        code = ("import sys; from tokenization import load_tokenizer; t = load_tokenizer(sys.argv[1]); "
                "print(type(t).__name__, t.vocab_size)")
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
        assert out.stdout.split() == [type(tokenizer).__name__, str(tokenizer.vocab_size)]
        assert tokenizer_from_dict(json.loads(path.read_text())).vocab.tokens == tokenizer.vocab.tokens


@pytest.mark.parametrize("token_format", ["remi", "groove"])
def test_every_format_fulfils_the_contract(token_format, chorale_midi):
    tokenizer: BaseTokenizer = format_class(token_format)()
    ids = tokenizer.encode(chorale_midi)
    state = tokenizer.constraint_state()
    assert isinstance(state, ConstraintState) and state.next_bar_time() == 0
    assert state.accepts(tokenizer.start_id) and state.allowed()[tokenizer.start_id]
    assert ids[0] == tokenizer.start_id
    for token in ids:
        assert state.accepts(token)
        state.advance(token)
    assert not state.accepts(-1) and not state.accepts(tokenizer.vocab_size)
    starts = tokenizer.bar_starts(ids)
    assert starts[0] == 0 and len(starts) > 4
    assert tokenizer.transpose(tokenizer.transpose(ids, 2), -2) == ids
    assert tokenizer.settings() == {"name": type(tokenizer).__name__, "config": tokenizer.config()}


def test_next_bar_time_after_a_prompt_cut_at_a_bar_start():
    """Both formats: where the bar after the prompt begins, in beats."""
    remi = REMITokenizer()
    bar = ["Beat_0", "Note_Pitch_60", "Note_Velocity_64", "Note_Duration_480"]
    ids = remi.strings_to_ids(["Bar_None", "TimeSig_3/4", *bar, "Bar_None", *bar, "Bar_None", *bar, "EOS_None"])
    groove = GrooveTokenizer()
    note = ["NoteOn_bass:40", "TimeShift_1:00", "NoteOff_bass:40"]
    to_bar = ["TimeShift_2:00", "TimeShift_1:00"]  # 1 + 2 + 1 beats: the next 4/4 bar line
    groove_ids = groove.strings_to_ids(["Start_None", *note, *to_bar, *note, *to_bar, *note, "End_None"])
    for tokenizer, ids, beats in ((remi, ids, 3), (groove, groove_ids, 4)):
        starts = tokenizer.bar_starts(ids)
        for bars in (1, 2):
            state = tokenizer.constraint_state()
            for token in ids[:starts[bars]]:
                state.advance(token)
            assert state.next_bar_time() == Fraction(bars * beats), (type(tokenizer).__name__, bars)
