"""Run configuration: typed dataclasses loaded from YAML, with `--set section.key=value` overrides.

    cfg = load_config("configs/demo.yaml", overrides=["train.max_steps=100", "model.pe=ape"])
    model_cfg = cfg.model_config(vocab_size=tokenizer.vocab_size)   # -> model.ModelConfig
    save_config(cfg, run_dir / "config.yaml")

A YAML file has up to four sections (`model`, `data`, `train`, `generate`); a missing section or key
keeps its default. Unknown sections or keys and values of the wrong type are a ValueError naming the
key and the file. The `model` section is `model.ModelConfig` without `vocab_size` (the tokenizer
gives it when the model is built); its fields and their comments live in model/config.py.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from data.kinds import CORPUS_KINDS, check_kind_format
from generation.recall import MIN_LAG, ORDERS, RecallConfig
from generation.sampling import NUCLEUS_SCOPES, SEED_MAX
from model import DEVICE_NAMES, ModelConfig
from tokenization import token_formats
from training.memory import ALLOCATORS

TRAIN_SEED_MAX = 2**32 - 1  # train.seed: offsets per process and epoch keep it within torch's range

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"  # the YAML files shipped with the repo
PRECISIONS = ("auto", "fp32", "bf16")
SPE_CODES = ("auto", "stored", "factorised")  # train.spe_code

# The model section: every ModelConfig field except vocab_size, same types and defaults.
ModelSection = dataclasses.make_dataclass(
    "ModelSection",
    [(f.name, typing.get_type_hints(ModelConfig)[f.name], field(default=f.default))
     for f in dataclasses.fields(ModelConfig) if f.name != "vocab_size"],
)
ModelSection.__doc__ = "model.ModelConfig without vocab_size (see model/config.py for each field)."


@dataclass
class DataConfig:
    kind: str = "default"  # corpus: default (music21 scores), midi_folder, pop1k7, pop909, groove or trio
    root: str = "corpus/default"  # folder of the tokenised corpus (built there on first use)
    source: Optional[str] = None  # folder of raw input to build from (midi_folder, pop1k7, pop909, groove)
    format: str = "remi"  # token format: remi (pop piano) or groove (3-track Groove2Groove events)
    crop_len: int = 256  # training crop length in tokens (each crop starts at a bar)
    max_bars: Optional[int] = None  # crops also stop before this many bars (pop piano: 48; None: off)
    samples_per_piece: int = 1  # crops of each training piece per epoch
    transpose: int = 6  # random transposition range -transpose..+transpose semitones (0: off)
    time_signatures: bool = True  # remi: emit TimeSig tokens where the meter changes
    max_pieces: Optional[int] = None  # default: use at most this many chorales; trio: pieces generated
    fim_rate: float = 0.0  # remi: fraction of training crops rearranged for fill in the middle (0: off)
    # fill in the middle: a rearranged crop's span ends where at most this many tokens follow it, as
    # short a suffix as generation reads (generation.infill.SUFFIX_TOKENS, 512); None: any span of the crop
    fim_suffix_tokens: Optional[int] = None
    # draw the crop that reaches a piece's end with probability crop_len / its length, so that endings
    # (and the end token) are trained as often as middles (data.crops.CropDataset); False: once per bar start
    end_crops: bool = False
    # draw the crop that starts at a piece's first bar with probability crop_len / its length, so that
    # song openings are trained as often as endings (data.crops.CropDataset); False: once per bar start
    start_crops: bool = False
    # fill in the middle may rearrange a crop that reaches a piece's end; False: such crops stay left to
    # right, so that the end token is learnt after a song's last bar as often as end_crops draws it
    fim_end_crops: bool = True
    # train with state passing (data.streams): each of train.batch_size streams reads whole songs from
    # their start in consecutive segments of crop_len tokens, and the model's recurrent state is carried
    # from one segment to the next (gradients stop at the segment's start); False: independent crops
    state_passing: bool = False
    # pop909: folder of POP909's beat annotations (NNN/beat_midi.txt); each song is moved so that its
    # first annotated downbeat falls on a bar line, and the tokens' bars are the music's (data.pop909)
    downbeats: Optional[str] = None

    def validate(self) -> None:
        _choice("data.kind", self.kind, CORPUS_KINDS)
        _choice("data.format", self.format, token_formats())
        check_kind_format(self.kind, self.format)  # before any corpus is built or loaded
        _at_least("data.crop_len", self.crop_len, 2)
        _at_least("data.transpose", self.transpose, 0)
        _at_least("data.samples_per_piece", self.samples_per_piece, 1)
        if not 0.0 <= self.fim_rate <= 1.0:
            raise ValueError(f"data.fim_rate must be in [0, 1], got {self.fim_rate}")
        if self.fim_rate > 0 and self.format != "remi":
            raise ValueError(f"data.fim_rate needs data.format=remi (fill in the middle), got {self.format}")
        if self.downbeats is not None and self.kind != "pop909":
            raise ValueError(f"data.downbeats aligns POP909's bars: it needs data.kind=pop909, got {self.kind}")
        if self.state_passing and (self.fim_rate > 0 or self.max_bars is not None or self.end_crops
                                   or self.start_crops):
            raise ValueError("data.state_passing reads whole songs in order: it cannot be combined with "
                             "data.fim_rate, data.max_bars, data.end_crops or data.start_crops")
        if self.fim_suffix_tokens is not None and self.fim_rate == 0:
            raise ValueError("data.fim_suffix_tokens shapes fill-in-the-middle crops: it needs data.fim_rate > 0")
        for name in ("max_bars", "max_pieces", "fim_suffix_tokens"):
            if getattr(self, name) is not None:
                _at_least(f"data.{name}", getattr(self, name), 1)


@dataclass
class TrainConfig:
    batch_size: int = 4  # sequences per step and per process (global batch = batch_size * processes)
    lr: float = 2e-4  # peak learning rate, reached after the warm-up
    min_lr: float = 5e-6  # learning rate at max_steps, after the cosine decay
    warmup_steps: int = 200  # linear warm-up from 0 to lr over this many steps
    max_steps: int = 100_000  # total optimisation steps (the length of the cosine schedule)
    max_epochs: Optional[int] = None  # if set, max_steps = max_epochs * batches per epoch instead
    # a wall-time budget: after the first PLAN_AFTER steps, max_steps is set so that the run (its
    # validations included) ends within this many minutes of the process's start, and the cosine
    # schedule ends there; the run also stops, with a checkpoint, if the deadline passes. The planned
    # max_steps replaces this field in the checkpoints, so --resume continues the same schedule
    max_minutes: Optional[float] = None
    weight_decay: float = 0.0  # AdamW decoupled weight decay on weight matrices (0: plain Adam)
    betas: tuple[float, float] = (0.9, 0.999)  # Adam moment decay rates
    grad_clip: float = 0.5  # clip the global gradient norm to this (0: no clipping)
    redraw_prob: float = 0.05  # probability per step of redrawing the FAVOR+ features (pop piano)
    redraw_every: int = 0  # redraw the FAVOR+ features every K steps instead (groove: 40; 0: off)
    eval_every: int = 500  # validation loss every this many steps (0: only at the end)
    eval_batches: int = 20  # validation batches per evaluation
    ckpt_every: int = 1000  # checkpoint every this many steps (one is also written at the end)
    keep_checkpoints: int = 3  # keep the newest this many checkpoints (0: keep all)
    log_every: int = 10  # CSV / TensorBoard / progress-bar logging interval in steps
    seed: int = 0  # seed of initialisation, data order, augmentation, dropout and SPE noise (< 2**32)
    device: str = "auto"  # auto (CUDA when available), cpu or cuda
    precision: str = "auto"  # auto (bf16 autocast on CUDA, fp32 on CPU), fp32 or bf16
    # how SPE applies its code (values are the same): auto (sineSPE's factored code for batches of
    # one sequence, else the stored code), stored (faster with several sequences per batch) or
    # factorised (sineSPE only: less memory, linear in the length); bench/README.md has the figures
    spe_code: str = "auto"
    num_workers: int = 0  # DataLoader worker processes per training process
    # CPU only: "system" (glibc's defaults) or "reuse": glibc keeps freed memory for the next step,
    # no page faults on the large tensors each step allocates again, at the price of some peak memory
    # (training/memory.py; bench/README.md: it sped SPE up before SPE reused its own codes)
    cpu_allocator: str = "system"

    def validate(self) -> None:
        for name in ("batch_size", "max_steps", "eval_batches", "log_every"):
            _at_least(f"train.{name}", getattr(self, name), 1)
        for name in ("warmup_steps", "redraw_every", "eval_every", "ckpt_every", "keep_checkpoints",
                     "num_workers", "seed"):
            _at_least(f"train.{name}", getattr(self, name), 0)
        _at_most("train.seed", self.seed, TRAIN_SEED_MAX, "2**32 - 1")
        if self.max_epochs is not None:
            _at_least("train.max_epochs", self.max_epochs, 1)
        if self.max_minutes is not None and not 0.0 < self.max_minutes < math.inf:
            raise ValueError(f"train.max_minutes must be > 0 and finite, got {self.max_minutes}")
        if self.max_minutes is not None and self.max_epochs is not None:
            raise ValueError("train.max_minutes and train.max_epochs both set the length of a run: give one")
        _choice("train.cpu_allocator", self.cpu_allocator, ALLOCATORS)
        if not 0.0 < self.lr or not 0.0 <= self.min_lr <= self.lr:
            raise ValueError(f"train.lr must be > 0 and 0 <= train.min_lr <= train.lr, "
                             f"got lr={self.lr}, min_lr={self.min_lr}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError("train.weight_decay and train.grad_clip must be >= 0")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"train.betas must be in [0, 1), got {self.betas}")
        if not 0.0 <= self.redraw_prob <= 1.0:
            raise ValueError(f"train.redraw_prob must be in [0, 1], got {self.redraw_prob}")
        _choice("train.device", self.device, DEVICE_NAMES)
        _choice("train.precision", self.precision, PRECISIONS)
        _choice("train.spe_code", self.spe_code, SPE_CODES)


@dataclass
class GenerateConfig:
    tokens: int = 3072  # number of tokens to generate (the paper trains on 2048, generates 3072)
    top_p: float = 0.9  # nucleus sampling: keep the smallest token set with this probability mass
    temperature: float = 1.2  # softmax temperature of sampling
    constrained: bool = True  # mask tokens that would break the format's grammar
    nucleus: str = "token"  # top_p cut over the whole vocabulary ("token") or within each token type ("type")
    prompt_bars: int = 0  # bars of a held-out piece used as the prompt (0: start from scratch)
    seed: int = 0  # seed of the sampling (0 .. 2**64 - 1, torch.Generator's range)
    end: bool = True  # the model may end a piece (End token) before the budget; False: it writes all it is asked
    hold_bars: Optional[int] = None  # groove formats: sampling closes any note held this many bars, and its pitch
    # rests a bar on its track before it sounds again (None: no limit)
    recall_weights: Optional[tuple[float, ...]] = None  # copy weight per recall order (generation.recall;
    # None: no recall; fitted on held-out pieces by `python -m bench.recall --write`)
    recall_orders: tuple[int, ...] = ORDERS  # key lengths of the recall's copy cache, increasing
    recall_min_lag: int = MIN_LAG  # recall copies from at least this many tokens back
    end_bias: float = 0.0  # added to the End token's logit while sampling (its odds times e**end_bias);
    # fitted on held-out songs by likelihood: `python -m bench.endings --fit --write`
    end_ramp: float = 0.0  # added to the End token's logit per bar line so far (formats with bar lines);
    # with end_bias, fitted to held-out songs' lengths: `python -m bench.lengths --ramp --write`
    token_bias: tuple[tuple[str, float], ...] = ()  # (token-name prefix, bias) pairs: every token whose name
    # starts with the prefix gets the bias added to its logit while sampling (`python -m bench.density`)
    nucleus_exempt: tuple[str, ...] = ()  # token-name prefixes the nucleus never cuts: those tokens are drawn
    # from their whole tempered distribution (a rare long note is not cut from the tail)
    bias_before_recall: bool = False  # token_bias is added to the model's logits before recall mixes its
    # copies in (a copied token keeps its odds), instead of to the mixture
    opening_boost: float = 0.0  # token_bias is (1 + opening_boost) times stronger at a piece's first bar line,
    # fading linearly to itself at bar line `opening_bars` (songs open sparser than they go on; 0: off)
    opening_bars: int = 16  # bar lines (the prompt's included) over which the opening boost fades out

    def validate(self) -> None:
        _at_least("generate.tokens", self.tokens, 1)
        if self.hold_bars is not None:
            _at_least("generate.hold_bars", self.hold_bars, 1)
        _at_least("generate.prompt_bars", self.prompt_bars, 0)
        if not 0.0 < self.top_p <= 1.0 or not 0.0 < self.temperature < math.inf:
            raise ValueError(f"generate.top_p must be in (0, 1] and generate.temperature finite and > 0, "
                             f"got {self.top_p}, {self.temperature}")
        _at_most("generate.seed", self.seed, SEED_MAX, "2**64 - 1")
        _at_least("generate.seed", self.seed, 0)
        _choice("generate.nucleus", self.nucleus, NUCLEUS_SCOPES)
        if not math.isfinite(self.end_bias) or not math.isfinite(self.end_ramp):
            raise ValueError(f"generate.end_bias and generate.end_ramp must be finite, got {self.end_bias}, "
                             f"{self.end_ramp}")
        for prefix, bias in self.token_bias:
            if not prefix or not math.isfinite(bias):
                raise ValueError(f"generate.token_bias needs (token-name prefix, finite bias) pairs, got "
                                 f"({prefix!r}, {bias})")
        _at_least("generate.opening_bars", self.opening_bars, 1)
        if not math.isfinite(self.opening_boost) or self.opening_boost < -1:
            raise ValueError(f"generate.opening_boost must be finite and >= -1, got {self.opening_boost}")
        if not all(self.nucleus_exempt):
            raise ValueError(f"generate.nucleus_exempt needs non-empty token-name prefixes, got {self.nucleus_exempt}")
        if self.recall_weights is not None:
            RecallConfig(self.recall_weights, self.recall_orders, self.recall_min_lag)  # a ValueError if wrong


@dataclass
class RunConfig:
    model: ModelSection = field(default_factory=ModelSection)  # network (ModelConfig minus vocab_size)
    data: DataConfig = field(default_factory=DataConfig)  # corpus and training crops
    train: TrainConfig = field(default_factory=TrainConfig)  # optimisation and logging
    generate: GenerateConfig = field(default_factory=GenerateConfig)  # sampling defaults

    def validate(self) -> None:
        """Raise ValueError on inconsistent values (types are checked when loading)."""
        self.model_config(vocab_size=1)  # ModelConfig validates its own fields
        self.data.validate()
        self.train.validate()
        self.generate.validate()

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The model.ModelConfig of this run for a tokenizer of `vocab_size` tokens."""
        return ModelConfig(vocab_size=vocab_size, **dataclasses.asdict(self.model))

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain nested dict (tuples as lists), as written to YAML and checkpoints."""
        return {name: {key: list(value) if isinstance(value, tuple) else value
                       for key, value in dataclasses.asdict(getattr(self, name)).items()}
                for name in SECTIONS}

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "<dict>") -> RunConfig:
        """Typed, validated RunConfig from a nested dict; `source` names the origin in errors."""
        if not isinstance(values, dict):
            raise ValueError(f"{source}: a config must be a mapping of sections, got {type(values).__name__}")
        unknown = sorted(set(values) - set(SECTIONS))
        if unknown:
            raise ValueError(f"{source}: unknown section {unknown[0]!r} (known: {', '.join(SECTIONS)})")
        sections = {}
        for name, section_type in SECTIONS.items():
            entries = values.get(name) or {}
            if not isinstance(entries, dict):
                raise ValueError(f"{source}: section {name!r} must be a mapping, got {entries!r}")
            sections[name] = _build_section(section_type, name, entries, source)
        cfg = cls(**sections)
        try:
            cfg.validate()
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from None
        return cfg


SECTIONS: dict[str, type] = {"model": ModelSection, "data": DataConfig, "train": TrainConfig,
                             "generate": GenerateConfig}


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A YAML path as given, or the name of a shipped config (`demo`, `pop_ape.yaml`)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    for candidate in (CONFIG_DIR / path.name, CONFIG_DIR / f"{path.name}.yaml"):
        if path.parent == Path(".") and candidate.is_file():
            return candidate
    shipped = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
    raise ValueError(f"config file not found: {name_or_path} (shipped configs: {shipped})")


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read a YAML config (path or shipped name) and apply `section.key=value` overrides."""
    path = resolve_config_path(path)
    try:
        values = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ValueError(f"{path}: cannot read config: {error}") from None
    if not isinstance(values, dict) or not values:
        found = "it is empty" if values is None or values == {} else f"it holds a {type(values).__name__}"
        raise ValueError(f"{path}: a config must be a mapping of sections ({', '.join(SECTIONS)}); {found}")
    return apply_overrides(RunConfig.from_dict(values, source=str(path)), overrides)


def apply_overrides(cfg: RunConfig, overrides: list[str] | tuple[str, ...]) -> RunConfig:
    """A copy of `cfg` with `section.key=value` strings applied (values parsed with the field's type)."""
    values = cfg.to_dict()
    for item in overrides:
        key, sep, text = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise ValueError(f"--set expects section.key=value, got {item!r}")
        if section not in SECTIONS:
            raise ValueError(f"--set {item}: unknown section {section!r} (known: {', '.join(SECTIONS)})")
        hints = typing.get_type_hints(SECTIONS[section])
        if name not in hints:
            raise ValueError(f"--set {item}: unknown key {key.strip()!r}")
        values[section][name] = _parse_text(text.strip(), hints[name])
    return RunConfig.from_dict(values, source="--set")


def save_config(cfg: RunConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (loads back to an equal RunConfig)."""
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))


# ------------------------------------------------------------------------------------ typing
def _build_section(section_type: type, section: str, entries: dict[str, Any], source: str) -> Any:
    hints = typing.get_type_hints(section_type)
    values = {}
    for key, value in entries.items():
        if key not in hints:
            raise ValueError(f"{source}: unknown key {section}.{key} "
                             f"(known: {', '.join(hints)})")
        try:
            values[key] = _coerce(value, hints[key])
        except TypeError as error:
            raise ValueError(f"{source}: {section}.{key}: {error}") from None
    return section_type(**values)


def _coerce(value: Any, annotation: Any) -> Any:
    """`value` checked against a field type (bool, int, float, str, Optional[...], tuple[...])."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0])
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0]) for v in value)
        if len(value) != len(args):
            raise TypeError(f"expected {len(args)} values, got {value!r}")
        return tuple(_coerce(v, a) for v, a in zip(value, args))
    if annotation is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if annotation is float and isinstance(value, str) and _is_float(value):  # YAML 1.1 reads 1e-4 as text
        return float(value)
    if annotation in (bool, int, str) and type(value) is annotation:
        return value
    raise TypeError(f"expected {getattr(annotation, '__name__', annotation)}, got {value!r}")


def _parse_text(text: str, annotation: Any) -> Any:
    """A command-line string as a value of the field's type (strings are taken verbatim)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    optional = origin in (Union, types.UnionType) and type(None) in args
    if optional and text.lower() in ("none", "null", "~", ""):
        return None
    if annotation is str or (optional and str in args):
        return text
    value = yaml.safe_load(text)
    if typing.get_origin(annotation) is tuple and isinstance(value, str):
        value = [yaml.safe_load(part) for part in value.split(",")]
    return value


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def _at_least(name: str, value: int, low: int) -> None:
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def _at_most(name: str, value: int, high: int, shown: str) -> None:
    if value > high:
        raise ValueError(f"{name} must be <= {shown}, got {value}")
