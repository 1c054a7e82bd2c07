"""Offline audio: tempo map, channel plan, rendering (duration, non-silence, onsets), loudness, files."""

from __future__ import annotations

import miditoolkit
import numpy as np
import pytest

from generation.audio import (DRUM_CHANNEL, AudioConfig, ChannelProgram, as_midi, channel_plan, default_soundfont,
                        normalise, read_wav, render, render_files, tick_to_seconds)
from groove import GrooveTokenizer

RATE = 22050  # enough for the checks, half the work of 44.1 kHz


def midi_with(notes_per_track, tempos=((0, 120.0),), tpb: int = 480) -> miditoolkit.MidiFile:
    """notes_per_track: [(program, is_drum, [(start_beat, end_beat, pitch, velocity), ...]), ...]."""
    midi = miditoolkit.MidiFile(ticks_per_beat=tpb)
    midi.tempo_changes = [miditoolkit.TempoChange(qpm, int(beat * tpb)) for beat, qpm in tempos]
    for program, is_drum, notes in notes_per_track:
        inst = miditoolkit.Instrument(program=program, is_drum=is_drum)
        inst.notes = [miditoolkit.Note(velocity=v, pitch=p, start=int(s * tpb), end=int(e * tpb))
                      for s, e, p, v in notes]
        midi.instruments.append(inst)
    return midi


def envelope(audio: np.ndarray, rate: int, hop: float = 0.005) -> tuple[np.ndarray, np.ndarray]:
    """Frame energies (mean square over 5 ms frames) and the frames' start times."""
    size = int(rate * hop)
    frames = len(audio) // size
    energy = np.square(audio[:frames * size].astype(np.float64)).mean(axis=1).reshape(frames, size).mean(axis=1)
    return energy, np.arange(frames) * hop


def test_the_shipped_soundfont_is_found():
    font = default_soundfont()
    assert font.name == "TimGM6mb.sf2" and font.stat().st_size > 1_000_000
    assert font.read_bytes()[:4] == b"RIFF"


def test_tempo_changes_are_honoured():
    # 120 qpm for 2 beats (1 s), then 60 qpm (1 s per beat)
    midi = midi_with([], tempos=((0, 120.0), (2, 60.0)))
    seconds = tick_to_seconds(midi, np.array([0, 480, 960, 1440, 2400]))
    assert np.allclose(seconds, [0.0, 0.5, 1.0, 2.0, 4.0])
    assert np.allclose(tick_to_seconds(midi_with([], tempos=()), np.array([960])), [1.0])  # default 120


def test_channel_plan_piano_and_the_three_groove_tracks(tmp_path):
    piano = midi_with([(0, False, [(0, 1, 60, 80)])])
    assert channel_plan(piano) == [ChannelProgram(0, 0, False)]
    tokenizer = GrooveTokenizer()
    tokens = ["Start_None", "NoteOn_bass:40", "NoteOn_drums:36", "NoteOn_accompaniment:64", "TimeShift_1:00",
              "NoteOff_bass:40", "NoteOff_drums:36", "NoteOff_accompaniment:64", "End_None"]
    path = tmp_path / "band.mid"
    tokenizer.write_midi(tokenizer.strings_to_ids(tokens), path)
    band = as_midi(path)  # bass, drums, accompaniment
    assert channel_plan(band) == [ChannelProgram(0, 33, False), ChannelProgram(DRUM_CHANNEL, 0, True),
                                  ChannelProgram(1, 0, False)]


def test_render_has_the_right_duration_sound_and_onsets():
    # short piano notes, with a tempo change: beats 0, 1 at 120 qpm (0, 0.5 s), then 60 qpm from beat 2
    onsets_beats = [0, 1, 2, 3, 4.5]
    expected = [0.0, 0.5, 1.0, 2.0, 3.5]  # seconds
    notes = [(b + 0.2, b + 0.3, 72, 100) for b in onsets_beats]  # onsets 0.2 beat late: not at sample 0
    midi = midi_with([(0, False, notes)], tempos=((0, 120.0), (2, 60.0)))
    expected = [t + (0.1 if t < 1.0 else 0.2) for t in expected]
    config = AudioConfig(sample_rate=RATE, tail_seconds=0.5)
    audio = render(midi, config)
    last_off = 3.5 + 0.3  # beat 4.8 at 60 qpm after beat 2 (1 s)
    assert audio.shape == (round((last_off + 0.5) * RATE), 2) and audio.dtype == np.float32
    energy, times = envelope(audio, RATE)
    assert energy.max() > 1e-4  # not silent
    for onset in expected:
        before = energy[(times > onset - 0.06) & (times < onset - 0.01)].mean()
        after = energy[(times >= onset) & (times < onset + 0.05)].max()
        assert after > 20 * before + 1e-9, (onset, before, after)
        rise = times[(times > onset - 0.1) & (energy > 0.2 * after)][0]  # first loud frame near the onset
        assert abs(rise - onset) <= 0.015, (onset, rise)
    assert energy[times < expected[0] - 0.01].max() < 1e-7  # silence before the first note


def test_drums_play_the_drum_kit_not_the_program():
    snare = midi_with([(0, True, [(0, 0.5, 38, 110)])])  # GM snare on channel 10
    low_piano = midi_with([(0, False, [(0, 0.5, 38, 110)])])  # the same key as a piano note (D2, 73 Hz)
    config = AudioConfig(sample_rate=RATE, tail_seconds=0.2)

    def centroid(audio: np.ndarray) -> float:
        spectrum = np.abs(np.fft.rfft(audio.mean(axis=1)))
        freqs = np.fft.rfftfreq(len(audio), 1 / RATE)
        return float((spectrum * freqs).sum() / spectrum.sum())

    assert centroid(render(snare, config)) > 4 * centroid(render(low_piano, config))


def test_instruments_sound_different():
    piano = render(midi_with([(0, False, [(0, 1, 60, 100)])]), AudioConfig(sample_rate=RATE))
    bass = render(midi_with([(33, False, [(0, 1, 60, 100)])]), AudioConfig(sample_rate=RATE))
    a, b = piano.mean(axis=1), bass.mean(axis=1)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.5


def test_loudness_is_normalised():
    config = AudioConfig()
    quiet = 0.01 * np.sin(np.linspace(0, 2000, 44100, dtype=np.float32))[:, None].repeat(2, axis=1)
    out = normalise(quiet, config)
    rms_db = 20 * np.log10(np.sqrt(np.mean(np.square(out, dtype=np.float64))))
    assert rms_db == pytest.approx(-20.0, abs=0.01)
    spiky = np.zeros((44100, 2), dtype=np.float32)
    spiky[::1000] = 0.5  # loud clicks, low RMS: the peak ceiling wins
    out = normalise(spiky, config)
    assert np.abs(out).max() == pytest.approx(10 ** (-1 / 20), rel=1e-4)
    silent = np.zeros((100, 2), dtype=np.float32)
    assert np.array_equal(normalise(silent, config), silent)


def test_files_are_written_and_readable(tmp_path):
    soundfile = pytest.importorskip("soundfile")
    midi = midi_with([(0, False, [(0, 1, 60, 90), (1, 2, 64, 90)])])
    path = tmp_path / "piece.mid"
    midi.dump(str(path))
    audio = render_files(path, tmp_path / "a.wav", tmp_path / "a.ogg", AudioConfig(sample_rate=RATE))
    wav, rate = read_wav(tmp_path / "a.wav")
    assert rate == RATE and wav.shape == audio.shape
    assert np.abs(wav - audio).max() < 1e-4
    ogg, ogg_rate = soundfile.read(str(tmp_path / "a.ogg"))
    assert ogg_rate == RATE and abs(len(ogg) - len(audio)) < RATE // 10
    assert (tmp_path / "a.ogg").stat().st_size < (tmp_path / "a.wav").stat().st_size / 4


def test_bad_inputs(tmp_path):
    junk = tmp_path / "junk.mid"
    junk.write_text("not midi")
    with pytest.raises(ValueError, match="not a readable MIDI"):
        render(junk)
    with pytest.raises(ValueError, match="soundfont not found"):
        render(midi_with([]), AudioConfig(soundfont=str(tmp_path / "none.sf2")))
    with pytest.raises(ValueError, match="min"):
        render(midi_with([(0, False, [(0, 10_000, 60, 90)])]), AudioConfig(max_seconds=60))
    with pytest.raises(ValueError):
        AudioConfig(peak_dbfs=3.0)


def test_a_long_piece_is_written_as_ogg(tmp_path):
    # 70 s of stereo in one libsndfile call crashed the process (segmentation fault in the Vorbis
    # encoder); write_ogg hands it over in blocks
    import soundfile

    from generation.audio import write_ogg

    rate = 44100
    t = np.arange(70 * rate) / rate
    audio = 0.3 * np.stack([np.sin(2 * np.pi * 220 * t), np.sin(2 * np.pi * 330 * t)], axis=1)
    write_ogg(tmp_path / "long.ogg", audio.astype(np.float32), rate)
    back, back_rate = soundfile.read(str(tmp_path / "long.ogg"))
    assert back_rate == rate and back.shape[1] == 2 and abs(len(back) - len(audio)) < rate // 10
