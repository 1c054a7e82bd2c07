"""Offline audio of decoded pieces: MIDI -> General MIDI SoundFont synthesis -> loudness-normalised WAV.

No system package is needed: the synthesiser is `tinysoundfont` (a pip wheel; installed with `--no-deps`
by the Makefile because its `pyaudio` dependency only serves live playback) and the default SoundFont
is the small General MIDI bank shipped inside `pretty_midi` (`TimGM6mb.sf2`).

    piece (a miditoolkit.MidiFile or a .mid path: `BaseTokenizer.write_midi` writes any format's)
      -> note events in seconds (tempo map honoured)
      -> one MIDI channel per GM program, drums on channel 10 (index 9) with the GM drum bank (128)
      -> stereo float32 at 44.1 kHz, with a release tail after the last note
      -> gain: RMS to -20 dBFS, peaks capped at -1 dBFS
      -> 16-bit PCM WAV (and Ogg Vorbis through `soundfile`, when asked)
"""

from __future__ import annotations

import importlib.util
import logging
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import miditoolkit
import numpy as np

from tokenization.midi_io import tick_to_seconds  # noqa: F401  (also part of this module's interface)

logger = logging.getLogger(__name__)

DRUM_CHANNEL = 9  # MIDI channel 10, 0-based
DRUM_BANK = 128  # the SoundFont bank of General MIDI drum kits
PITCHED_CHANNELS = tuple(c for c in range(16) if c != DRUM_CHANNEL)


@dataclass
class AudioConfig:
    sample_rate: int = 44100  # output frames per second
    soundfont: str | None = None  # a General MIDI .sf2; None: pretty_midi's TimGM6mb.sf2
    target_rms_dbfs: float = -20.0  # RMS level the whole piece is scaled to
    peak_dbfs: float = -1.0  # ceiling of the sample peaks after scaling (wins over the RMS target)
    tail_seconds: float = 1.0  # silence rendered after the last note-off, for the release
    max_seconds: float = 1200.0  # longest piece rendered (a longer one is an error, not a huge buffer)

    def __post_init__(self) -> None:
        if not 8000 <= self.sample_rate <= 192000:
            raise ValueError(f"sample_rate must be in 8000 .. 192000, got {self.sample_rate}")
        if self.peak_dbfs > 0 or self.target_rms_dbfs > self.peak_dbfs:
            raise ValueError("need target_rms_dbfs <= peak_dbfs <= 0")


@dataclass(frozen=True)
class ChannelProgram:
    channel: int  # MIDI channel, 0-based (9: drums)
    program: int  # GM program (drums: the kit number)
    is_drum: bool  # whether the channel plays the GM drum bank


@dataclass(frozen=True)
class NoteEvent:
    time: float  # seconds from the start
    is_on: bool  # note-on (else note-off)
    channel: int  # MIDI channel, 0-based
    pitch: int  # MIDI key
    velocity: int  # 1..127 for note-ons


def default_soundfont() -> Path:
    """pretty_midi's bundled General MIDI SoundFont."""
    spec = importlib.util.find_spec("pretty_midi")
    if spec is None or spec.origin is None:
        raise ImportError("pretty_midi is not installed: it ships the default SoundFont (pip install pretty_midi)")
    path = Path(spec.origin).parent / "TimGM6mb.sf2"
    if not path.is_file():
        raise OSError(f"the SoundFont shipped with pretty_midi is missing: {path}")
    return path


def as_midi(piece: miditoolkit.MidiFile | str | Path) -> miditoolkit.MidiFile:
    """A miditoolkit.MidiFile from a MidiFile or a MIDI file path (a decoded piece of any format:
    the file `BaseTokenizer.write_midi` wrote)."""
    if isinstance(piece, miditoolkit.MidiFile):
        return piece
    try:
        return miditoolkit.MidiFile(str(piece))
    except (OSError, ValueError, EOFError, KeyError, IndexError) as error:
        raise ValueError(f"{piece}: not a readable MIDI file ({error})") from None


def channel_plan(midi: miditoolkit.MidiFile) -> list[ChannelProgram]:
    """Per instrument of `midi` (file order), the channel and GM program it is played with.

    Drum tracks share channel 10; pitched tracks get one channel per distinct program, in order of
    appearance (more than 15 programs: the extra ones share channels, with their first user's program).
    """
    plan, by_program = [], {}
    for inst in midi.instruments:
        if inst.is_drum:
            plan.append(ChannelProgram(DRUM_CHANNEL, int(inst.program), True))
            continue
        program = int(inst.program)
        if program not in by_program:
            if len(by_program) < len(PITCHED_CHANNELS):
                by_program[program] = ChannelProgram(PITCHED_CHANNELS[len(by_program)], program, False)
            else:
                shared = list(by_program.values())[len(by_program) % len(PITCHED_CHANNELS)]
                logger.warning("more than %d instruments: program %d plays on channel %d as program %d",
                               len(PITCHED_CHANNELS), program, shared.channel + 1, shared.program)
                by_program[program] = shared
        plan.append(by_program[program])
    return plan


def note_events(midi: miditoolkit.MidiFile, plan: list[ChannelProgram]) -> list[NoteEvent]:
    """Note-ons and note-offs in seconds, time-ordered; at one time note-offs come first."""
    rows = [(n.start, n.end, n.pitch, n.velocity, slot.channel)
            for inst, slot in zip(midi.instruments, plan) for n in inst.notes if n.end > n.start]
    if not rows:
        return []
    table = np.asarray(rows, dtype=np.int64)  # (N, 5)
    starts = tick_to_seconds(midi, table[:, 0])
    ends = tick_to_seconds(midi, table[:, 1])
    events = []
    for (_, _, pitch, velocity, channel), on, off in zip(table.tolist(), starts, ends):
        if 0 <= pitch <= 127:
            events.append(NoteEvent(float(on), True, channel, pitch, int(min(max(velocity, 1), 127))))
            events.append(NoteEvent(float(off), False, channel, pitch, 0))
    return sorted(events, key=lambda e: (e.time, e.is_on, e.channel, e.pitch))


class AudioTooLong(ValueError):
    """The piece lasts longer than AudioConfig.max_seconds: it is not rendered."""


def load_soundfont(font: Path, sample_rate: int = 44100) -> tuple[Any, int]:
    """A tinysoundfont.Synth with `font` loaded and its SoundFont id; ValueError naming the file when
    it is missing or not a SoundFont (checked before a long generation, and again when rendering)."""
    import tinysoundfont

    if not font.is_file():
        raise ValueError(f"soundfont not found: {font}")
    synth = tinysoundfont.Synth(samplerate=sample_rate)
    try:
        return synth, synth.sfload(str(font))
    except (tinysoundfont.SoundFontException, OSError, RuntimeError) as error:
        raise ValueError(f"cannot load soundfont {font}: not a SoundFont 2 file ({error})") from None


def render(piece: miditoolkit.MidiFile | str | Path, config: AudioConfig | None = None) -> np.ndarray:
    """Synthesise a piece: (frames, 2) float32 stereo at config.sample_rate, not yet normalised."""
    config = config or AudioConfig()
    midi = as_midi(piece)
    plan = channel_plan(midi)
    events = note_events(midi, plan)
    rate = config.sample_rate
    length = (events[-1].time if events else 0.0) + config.tail_seconds
    if length > config.max_seconds:
        raise AudioTooLong(f"the piece lasts {length / 60:.1f} min: longer than the {config.max_seconds / 60:.0f} "
                           f"min that are rendered to audio")
    font = Path(config.soundfont) if config.soundfont else default_soundfont()
    synth, sfid = load_soundfont(font, rate)
    for slot in sorted(set(plan), key=lambda s: s.channel):
        _select_program(synth, sfid, slot)

    total = int(round(length * rate))
    out = np.zeros((total, 2), dtype=np.float32)  # (frames, 2)
    position = 0
    for event in events:
        frame = min(int(round(event.time * rate)), total)
        position = _synthesise(synth, out, position, frame)
        if event.is_on:
            synth.noteon(event.channel, event.pitch, event.velocity)
        else:
            synth.noteoff(event.channel, event.pitch)
    _synthesise(synth, out, position, total)
    return out


def _select_program(synth: Any, sfid: int, slot: ChannelProgram) -> None:
    """Load the slot's preset on its channel; a preset the SoundFont lacks falls back to its bank's 0."""
    bank = DRUM_BANK if slot.is_drum else 0
    for preset in dict.fromkeys((slot.program, 0)):
        try:
            synth.program_select(slot.channel, sfid, bank, preset, slot.is_drum)
            if preset != slot.program:
                logger.warning("the SoundFont has no preset %d in bank %d: using preset 0", slot.program, bank)
            return
        except RuntimeError:
            continue
    raise ValueError(f"the SoundFont has no preset in bank {bank} for channel {slot.channel + 1}")


def _synthesise(synth: Any, out: np.ndarray, start: int, stop: int) -> int:
    """Fill out[start:stop] with the synthesiser's output; returns stop."""
    if stop > start:
        block = np.frombuffer(synth.generate(stop - start), dtype=np.float32)  # (2 * frames,) interleaved
        out[start:stop] = block.reshape(-1, 2)
    return max(start, stop)


def normalise(audio: np.ndarray, config: AudioConfig | None = None) -> np.ndarray:
    """Scale to the RMS target, then down so that peaks stay under the ceiling; silence is unchanged."""
    config = config or AudioConfig()
    rms = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64)))) if audio.size else 0.0
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    if rms == 0.0:
        logger.warning("the rendered audio is silent")
        return audio
    gain = 10.0 ** (config.target_rms_dbfs / 20.0) / rms
    gain = min(gain, 10.0 ** (config.peak_dbfs / 20.0) / peak)
    return (audio * gain).astype(np.float32)


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int) -> None:
    """(frames, 2) float audio in [-1, 1] as a 16-bit PCM stereo WAV file."""
    pcm = np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2")  # (frames, 2)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(audio.shape[1])
        handle.setsampwidth(2)
        handle.setframerate(sample_rate)
        handle.writeframes(pcm.tobytes())


OGG_BLOCK = 16384  # frames handed to the Vorbis encoder per call


def write_ogg(path: str | Path, audio: np.ndarray, sample_rate: int) -> None:
    """(frames, 2) float audio as Ogg Vorbis (through soundfile's bundled libsndfile), written in
    blocks: one call with a whole piece (63 s of a 3072-token generation) crashed the process with a
    segmentation fault inside libsndfile's Vorbis encoder; the same audio in blocks does not."""
    import soundfile

    with soundfile.SoundFile(str(path), "w", sample_rate, audio.shape[1], format="OGG",
                             subtype="VORBIS") as handle:
        for start in range(0, len(audio), OGG_BLOCK):
            handle.write(audio[start:start + OGG_BLOCK])


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """A 16-bit PCM WAV file as ((frames, channels) float32 in [-1, 1], sample rate)."""
    with wave.open(str(path), "rb") as handle:
        if handle.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM WAV files are read")
        data = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
        audio = data.reshape(-1, handle.getnchannels()).astype(np.float32) / 32767.0
        return audio, handle.getframerate()


def render_files(piece: miditoolkit.MidiFile | str | Path, wav: str | Path | None = None, ogg: str | Path | None = None,
                 config: AudioConfig | None = None) -> np.ndarray:
    """Render, normalise and write the requested files; returns the normalised audio."""
    config = config or AudioConfig()
    audio = normalise(render(piece, config), config)
    if wav is not None:
        write_wav(wav, audio, config.sample_rate)
    if ogg is not None:
        write_ogg(ogg, audio, config.sample_rate)
    return audio
