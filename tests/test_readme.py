"""The README's commands as written: every option they pass exists, every config and --set key they name
loads, and the make targets and console scripts they call are defined (running them is `make demo`'s
and the apps tests' work)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from apps import evaluate, generate, train
from training.config import load_config

REPO = Path(__file__).resolve().parent.parent


def readme_commands() -> list[list[str]]:
    """Each command line of the README's ```bash blocks, as words (comments and continuations joined)."""
    text = (REPO / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


COMMANDS = readme_commands()


def test_the_readme_has_commands_to_check():
    scripts = {words[1] for words in COMMANDS if words[0].endswith("python")}
    assert {"generate.py", "train.py", "evaluate.py"} <= scripts


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(words)[:60] for words in COMMANDS])
def test_a_readme_command_is_one_the_project_accepts(words):
    program, args = words[0], words[1:]
    if program == "make":
        targets = re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), flags=re.M)
        assert set(args) <= set(targets)
    elif program.endswith("python"):
        script, options = args[0], args[1:]
        if script == "generate.py":
            generate.build_parser().parse_args(options)
        elif script == "evaluate.py":
            evaluate.build_parser().parse_args(options)
        elif script == "train.py":
            parsed = train.parse_args(options)
            if parsed.init_from is None:  # a fine-tune takes its config from the model it starts from
                load_config(parsed.config or train.DEFAULT_CONFIG, parsed.overrides)
        else:
            pytest.fail(f"the README runs {script}, which this test does not know")
    else:
        section = (REPO / "pyproject.toml").read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
        scripts = re.findall(r"^([\w-]+)\s*=", section, flags=re.M)
        assert Path(program).name in scripts, f"{program} is not a console script of pyproject.toml"


def generate_options() -> list[list[str]]:
    """The option spans (`--...`) of the README's Generate section, as words."""
    section = (REPO / "README.md").read_text().split("### Generate", 1)[1].split("\n### ", 1)[0]
    return [shlex.split(span) for span in re.findall(r"`(--[^`]*)`", section)]


def test_the_generate_options_the_readme_describes_exist():
    parser = generate.build_parser()
    known = {option for action in parser._actions for option in action.option_strings}
    spans = generate_options()
    assert len(spans) > 10
    for words in spans:
        if len(words) == 1 or words[1].isupper():  # an option named alone, or with a placeholder (N)
            assert words[0] in known, words[0]
        else:
            parser.parse_args(words)
