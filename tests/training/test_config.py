"""training.config: YAML loading, unknown keys, type errors, --set overrides, round trip."""

from __future__ import annotations

import pytest
import yaml

from training.config import CONFIG_DIR, RunConfig, apply_overrides, load_config, save_config


def write(tmp_path, values, name="run.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values))
    return path


def test_missing_sections_and_keys_keep_defaults(tmp_path):
    cfg = load_config(write(tmp_path, {"train": {"lr": 3e-4}}))
    assert cfg.train.lr == 3e-4
    assert cfg.train.batch_size == RunConfig().train.batch_size
    assert cfg.model.d_model == RunConfig().model.d_model


@pytest.mark.parametrize("text, found", [("", "empty"), ("# only a comment\n", "empty"), ("{}\n", "empty"),
                                         ("- model\n- train\n", "list"), ("demo\n", "str")])
def test_an_empty_or_non_mapping_config_names_the_file(tmp_path, text, found):
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"odd\.yaml: a config must be a mapping of sections.*{found}"):
        load_config(path)


@pytest.mark.parametrize("key, value", [("train.seed", 2**32), ("train.seed", -1), ("generate.seed", 2**64),
                                        ("generate.seed", -1), ("generate.temperature", float("inf")),
                                        ("generate.temperature", float("nan")), ("generate.top_p", float("nan")),
                                        ("train.max_minutes", 0.0), ("train.max_minutes", float("inf"))])
def test_seeds_and_sampling_values_are_range_checked(tmp_path, key, value):
    section, name = key.split(".")
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        load_config(write(tmp_path, {section: {name: value}}))


def test_a_wall_time_budget_and_epochs_are_exclusive(tmp_path):
    with pytest.raises(ValueError, match="max_minutes and train.max_epochs"):
        load_config(write(tmp_path, {"train": {"max_minutes": 5.0, "max_epochs": 2}}))


def test_unknown_key_names_key_and_file(tmp_path):
    path = write(tmp_path, {"train": {"learning_rate": 1e-4}})
    with pytest.raises(ValueError, match=r"run\.yaml.*train\.learning_rate"):
        load_config(path)


def test_unknown_section_and_vocab_size_are_refused(tmp_path):
    with pytest.raises(ValueError, match="optimiser"):
        load_config(write(tmp_path, {"optimiser": {"lr": 1}}))
    with pytest.raises(ValueError, match="model.vocab_size"):  # taken from the tokenizer
        load_config(write(tmp_path, {"model": {"vocab_size": 300}}))


@pytest.mark.parametrize("section, key, value", [
    ("train", "batch_size", "four"),
    ("train", "batch_size", 4.5),
    ("train", "batch_size", True),       # a bool is not an int
    ("model", "gated", "yes please"),
    ("train", "betas", [0.9]),           # two values needed
    ("data", "root", 12),
    ("generate", "top_p", [0.9]),
])
def test_wrong_types_are_refused(tmp_path, section, key, value):
    with pytest.raises(ValueError, match=f"{section}.{key}"):
        load_config(write(tmp_path, {section: {key: value}}))


def test_bad_values_are_refused(tmp_path):
    with pytest.raises(ValueError, match="pe"):
        load_config(write(tmp_path, {"model": {"pe": "sinusoid"}}))
    with pytest.raises(ValueError, match="min_lr"):
        load_config(write(tmp_path, {"train": {"lr": 1e-4, "min_lr": 1e-3}}))
    with pytest.raises(ValueError, match="precision"):
        load_config(write(tmp_path, {"train": {"precision": "fp8"}}))
    with pytest.raises(ValueError, match="spe_code"):
        load_config(write(tmp_path, {"train": {"spe_code": "fast"}}))
    with pytest.raises(ValueError, match="cpu_allocator"):
        load_config(write(tmp_path, {"train": {"cpu_allocator": "jemalloc"}}))


def test_ints_are_accepted_for_floats(tmp_path):
    cfg = load_config(write(tmp_path, {"train": {"grad_clip": 1}}))
    assert cfg.train.grad_clip == 1.0 and isinstance(cfg.train.grad_clip, float)
    path = tmp_path / "plain.yaml"
    path.write_text("train:\n  lr: 3e-4\n")  # YAML 1.1 reads 3e-4 as a string
    assert load_config(path).train.lr == 3e-4


def test_set_overrides_parse_with_the_field_type(tmp_path):
    path = write(tmp_path, {"train": {"seed": 0}})
    cfg = load_config(path, ["train.max_steps=12", "train.lr=3e-4", "model.gated=false",
                             "data.root=1e3", "train.betas=0.8,0.95", "data.max_pieces=5",
                             "model.pe=ape"])
    assert cfg.train.max_steps == 12 and cfg.train.lr == 3e-4 and cfg.model.gated is False
    assert cfg.data.root == "1e3"  # a str field keeps the text verbatim
    assert cfg.train.betas == (0.8, 0.95) and cfg.data.max_pieces == 5 and cfg.model.pe == "ape"
    assert load_config(path, ["data.max_pieces=5", "data.max_pieces=none"]).data.max_pieces is None


@pytest.mark.parametrize("item, message", [
    ("train.max_steps=ten", "train.max_steps"),
    ("train.nope=1", "train.nope"),
    ("trian.lr=1", "trian"),
    ("lr=1", "section.key=value"),
    ("train.lr", "section.key=value"),
])
def test_bad_overrides(tmp_path, item, message):
    with pytest.raises(ValueError, match=message):
        load_config(write(tmp_path, {"train": {"seed": 0}}), [item])


def test_save_and_load_round_trip(tmp_path):
    cfg = apply_overrides(RunConfig(), ["train.betas=0.8,0.9", "model.pe=conv_spe", "data.source=x"])
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


def test_model_config_takes_vocab_size():
    cfg = load_config("demo")
    model_cfg = cfg.model_config(vocab_size=123)
    assert model_cfg.vocab_size == 123 and model_cfg.d_model == cfg.model.d_model


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_configs_load(path):
    cfg = load_config(path)
    assert load_config(path.stem) == cfg  # by name too


def test_paper_settings():
    conv = load_config("pop_conv")
    conv_gated = load_config("pop_conv_gated")
    assert (conv.model.gated, conv.model.kernel_size) == (False, 512)
    assert (conv_gated.model.gated, conv_gated.model.kernel_size) == (True, 128)
    assert load_config("pop_ape").train.lr == 1e-4 and load_config("pop_sine").train.lr == 2e-4
    groove = load_config("groove_sine")
    assert (groove.model.num_sines, groove.train.redraw_every, groove.data.crop_len) == (8, 40, 512)


def test_missing_file():
    with pytest.raises(ValueError, match="not found"):
        load_config("no_such_config.yaml")


def test_format_must_match_the_corpus_kind_before_anything_is_built(tmp_path):
    with pytest.raises(ValueError, match=r"run\.yaml.*a trio corpus is tokenised in the groove format"):
        load_config(write(tmp_path, {"data": {"kind": "trio", "format": "remi"}}))
    assert load_config(write(tmp_path, {"data": {"kind": "trio", "format": "groove"}})).data.format == "groove"
