"""Tests of the `dicta` Python package against the `dicta` binary on the same model and files.

Needs the package installed (`pip install ./python`), the binary (`DICTA_BIN`, default
target/release/dicta) and a Whisper model folder (`DICTA_TEST_MODEL_DIR`; scripts/test.sh sets
it, and then a missing model is a failure, not a skip). Audio comes from samples/ and
../shared/data.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path

import numpy as np
import pytest

import dicta

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
BIN = Path(os.environ.get("DICTA_BIN", ROOT / os.environ.get("CARGO_TARGET_DIR", "target") / "release" / "dicta"))
JFK = ROOT / "samples" / "jfk.flac"
# A 16 kHz 16-bit mono WAV, a 22.05 kHz one, and an MP3 (read by the engine, not by Python).
WAV_16K = DATA / "faster_whisper" / "stereo_diarization.ch0.16k.wav"
WAV_22K = DATA / "coqui_tts" / "LJ001-0002.wav"
MP3 = DATA / "faster_whisper" / "hotwords.mp3"


def model_dir() -> str:
    d = os.environ.get("DICTA_TEST_MODEL_DIR")
    if d:
        assert (Path(d) / "model.bin").is_file(), f"DICTA_TEST_MODEL_DIR={d} holds no model"
        return d
    d = Path.home() / ".cache" / "dicta" / "models" / "tiny.en"
    if not (d / "model.bin").is_file():
        pytest.skip("no Whisper model (set DICTA_TEST_MODEL_DIR)")
    return str(d)


@pytest.fixture(scope="module")
def engine() -> dicta.Engine:
    return dicta.Engine(model_dir(), threads=2)


def files() -> list:
    fs = [JFK, WAV_16K, WAV_22K, MP3]
    missing = [str(f) for f in fs if not f.is_file()]
    assert not missing, f"test audio missing: {missing}"
    return [str(f) for f in fs]


def cli(*args: str) -> dict:
    assert BIN.is_file(), f"no dicta binary at {BIN} (cargo build --release, or set DICTA_BIN)"
    out = subprocess.run([str(BIN), "transcribe", "--quiet", "--model", model_dir(), *args], capture_output=True, check=False)
    assert out.returncode in (0, 1), out.stderr.decode()
    return json.loads(out.stdout)


def read_wav(path: Path):
    """16-bit PCM samples of a mono WAV with Python's own reader (not Dicta's), as float32."""
    with wave.open(str(path)) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0, rate


def without_stats(out: dict) -> list:
    return out["results"]


def test_results_are_the_clis(engine):
    fs = files()
    mine = engine.transcribe(fs, beam_size=1)
    theirs = cli("--beam-size", "1", *fs)
    assert without_stats(mine) == without_stats(theirs)
    assert [r["id"] for r in mine["results"]] == fs
    assert all(r["error"] is None and r["text"] for r in mine["results"])
    assert mine["stats"]["inputs"] == len(fs)
    # Verbose results and word timestamps are the CLI's too.
    mine = engine.transcribe(fs[:2], beam_size=1, word_timestamps=True, verbose=True)
    theirs = cli("--beam-size", "1", "--word-timestamps", "--format", "verbose-json", *fs[:2])
    assert without_stats(mine) == without_stats(theirs)
    assert mine["results"][0]["segments"][0]["words"]


def test_default_options_are_the_clis(engine):
    # Beam 5 with fallback, the CLI's defaults.
    assert without_stats(engine.transcribe([str(JFK)])) == without_stats(cli(str(JFK)))


def test_decoding_keywords_are_the_clis_flags(engine):
    # faster-whisper's keyword names, the CLI's flags: the same results, and they matter.
    fs = files()
    kw = dict(beam_size=3, patience=2.0, length_penalty=0.5, suppress_tokens=[-1, 843, 262],
              hotwords="Gutenberg, the Exhibition", max_new_tokens=30, no_speech_threshold=None,
              repetition_penalty=1.2, no_repeat_ngram_size=4)
    mine = engine.transcribe(fs, **kw)
    theirs = cli("--beam-size", "3", "--patience", "2", "--length-penalty", "0.5",
                 "--suppress-tokens", "-1,843,262", "--hotwords", "Gutenberg, the Exhibition",
                 "--max-new-tokens", "30", "--no-speech-threshold", "none",
                 "--repetition-penalty", "1.2", "--no-repeat-ngram-size", "4", *fs)
    assert without_stats(mine) == without_stats(theirs)
    assert without_stats(mine) != without_stats(engine.transcribe(fs, beam_size=3))
    # clip_timestamps in both of faster-whisper's forms == the CLI's --clip-timestamps.
    clipped = cli("--clip-timestamps", "0.5,3,6", str(JFK))
    for form in ("0.5,3,6", [0.5, 3, 6]):
        assert without_stats(engine.transcribe([str(JFK)], clip_timestamps=form)) == without_stats(clipped)
    segs = clipped["results"][0]["segments"]
    assert segs and all(0.5 <= s["start"] and (s["end"] <= 3 or s["start"] >= 6) for s in segs), segs
    with pytest.raises(dicta.InvalidInput, match="clip_timestamps"):
        engine.transcribe([str(JFK)], clip_timestamps="1,x")
    # faster-whisper's prefix: the transcript starts with it, as with the CLI's --prefix.
    mine = engine.transcribe([str(JFK)], prefix="And so,")
    assert without_stats(mine) == without_stats(cli("--prefix", "And so,", str(JFK)))
    assert mine["results"][0]["text"].startswith("And so,"), mine["results"][0]["text"]
    # Language detection options are accepted (tiny.en is English-only: nothing to detect).
    mine = engine.transcribe([str(JFK)], language_detection_segments=2, language_detection_threshold=0.7,
                             multilingual=True)
    theirs = cli("--language-detection-segments", "2", "--language-detection-threshold", "0.7",
                 "--multilingual", str(JFK))
    assert without_stats(mine) == without_stats(theirs)
    with pytest.raises(dicta.InvalidInput, match="language_detection_segments"):
        engine.transcribe([str(JFK)], language_detection_segments=0)
    # hallucination_silence_threshold reaches the engine (it needs word timestamps there).
    mine = engine.transcribe([str(JFK)], word_timestamps=True, hallucination_silence_threshold=2.0)
    theirs = cli("--word-timestamps", "--hallucination-silence-threshold", "2", str(JFK))
    assert without_stats(mine) == without_stats(theirs)
    with pytest.raises(dicta.InvalidInput, match="needs word timestamps"):
        engine.transcribe([str(JFK)], hallucination_silence_threshold=2.0)
    # token_logprobs: each segment's text tokens, whose bytes spell it; the text unchanged.
    mine = engine.transcribe([str(JFK)], token_logprobs=True)["results"][0]
    plain = engine.transcribe([str(JFK)])["results"][0]
    assert mine["text"] == plain["text"] and "token_logprobs" not in plain["segments"][0]
    for s in mine["segments"]:
        lps = s["token_logprobs"]
        assert b"".join(bytes(t["bytes"]) for t in lps).decode() == s["text"]
        assert all(t["logprob"] <= 0 for t in lps)


def test_an_array_gives_the_text_of_its_file(engine):
    for path in (WAV_16K, WAV_22K):
        samples, rate = read_wav(path)
        by_file = engine.transcribe([str(path)], beam_size=1)["results"][0]
        by_array = engine.transcribe([("clip", samples, rate)], beam_size=1)["results"][0]
        assert by_array["id"] == "clip" and by_array["error"] is None
        assert by_array["text"] == by_file["text"], path
        assert by_array["segments"] == by_file["segments"], path
    # decode_audio + an array == the file, for a format Python cannot read itself.
    samples = dicta.decode_audio(str(JFK))
    assert samples.dtype == np.float32 and abs(len(samples) / 16000 - 11.0) < 0.05
    by_array = engine.transcribe([("jfk", samples, 16000)], beam_size=1)["results"][0]
    by_file = engine.transcribe([str(JFK)], beam_size=1)["results"][0]
    assert by_array["segments"] == by_file["segments"]
    # Lists and float64 arrays are accepted too.
    by_list = engine.transcribe([("jfk", samples.astype(np.float64), 16000)], beam_size=1)["results"][0]
    assert by_list["text"] == by_file["text"]


def test_bytes_give_the_text_of_their_file(engine):
    by_file = engine.transcribe([str(MP3)], beam_size=1)["results"][0]
    by_bytes = engine.transcribe([MP3.read_bytes()], beam_size=1)["results"][0]
    assert by_bytes["id"] == "input-0"
    assert by_bytes["segments"] == by_file["segments"]
    # A single input needs no list; a manifest entry is an input too.
    one = engine.transcribe(str(MP3), beam_size=1)["results"]
    assert len(one) == 1 and one[0]["segments"] == by_file["segments"]
    entry = engine.transcribe([{"id": "hw", "audio": str(MP3)}], beam_size=1)["results"][0]
    assert entry["id"] == "hw" and entry["segments"] == by_file["segments"]


def test_a_bad_input_fails_alone(engine, tmp_path):
    trunc = tmp_path / "empty.wav"
    trunc.write_bytes(b"")
    good = str(WAV_16K)
    alone = engine.transcribe([good], beam_size=1)["results"][0]
    out = engine.transcribe(
        [good, b"this is not audio at all", str(tmp_path / "missing.flac"), ("nan", np.full(1600, np.nan, dtype=np.float32), 16000), str(trunc), good],
        beam_size=1,
    )["results"]
    assert [r["error"] is None for r in out] == [True, False, False, False, False, True]
    assert out[0]["text"] == alone["text"] == out[5]["text"]
    kinds = [r["error"]["type"] for r in out[1:5]]
    assert kinds[0] == "unsupported_format", out[1]
    assert kinds[1] == "io", out[2]
    assert kinds[2] == "corrupt_input", out[3]
    assert kinds[3] == "empty_input", out[4]
    assert all(r["text"] is None and r["segments"] == [] for r in out[1:5])
    assert "missing.flac" in out[2]["error"]["message"]


def test_bad_calls_raise_typed_errors(engine):
    with pytest.raises(dicta.InvalidInput, match="unknown option \"beam\""):
        engine.transcribe([str(JFK)], beam=1)
    with pytest.raises(dicta.InvalidInput, match="beam_size must be"):
        engine.transcribe([str(JFK)], beam_size="five")
    with pytest.raises(dicta.InvalidInput, match="beam_size must be >= 1, got 0"):
        engine.transcribe([str(JFK)], beam_size=0)
    with pytest.raises(ValueError, match="task must be"):  # InvalidInput is a ValueError
        engine.transcribe([str(JFK)], task="summarize")
    with pytest.raises(dicta.InvalidInput, match="vad_parameters"):
        engine.transcribe([str(JFK)], vad_filter=True, vad_parameters={"treshold": 0.5})
    with pytest.raises(dicta.InvalidInput, match="final_window must be"):
        engine.transcribe([str(JFK)], final_window="last")
    with pytest.raises(dicta.InvalidInput, match="sample_rate must be a positive int"):
        engine.transcribe([("x", np.zeros(16000, dtype=np.float32), 0)])
    with pytest.raises(dicta.InvalidInput, match="1-D"):
        engine.transcribe([("x", np.zeros((2, 16000), dtype=np.float32), 16000)])
    with pytest.raises(dicta.InvalidInput, match="expected a path"):
        engine.transcribe([42])
    # Without a VAD loaded, vad_filter fails every input with the reason (as the library does).
    out = engine.transcribe([str(JFK)], vad_filter=True)["results"][0]
    assert out["error"]["type"] == "invalid_input" and "vad_model" in out["error"]["message"]
    assert set(dicta.Engine.transcribe_options()) >= {"beam_size", "language", "word_timestamps", "vad_filter", "final_window"}


def test_loading_errors_are_typed(tmp_path):
    with pytest.raises(dicta.ModelLoad, match="neither a folder nor a known model name"):
        dicta.Engine("no-such-model", home=tmp_path)
    with pytest.raises(dicta.ModelLoad):
        dicta.Engine(str(tmp_path))  # an empty folder
    with pytest.raises(dicta.InvalidInput, match="compute"):
        dicta.Engine(model_dir(), compute_type="float128")
    with pytest.raises(dicta.InvalidInput, match="long_form"):
        dicta.Engine(model_dir(), long_form="sideways")
    assert issubclass(dicta.ModelLoad, dicta.DictaError)
    assert "tiny.en" in dicta.known_models()
    # Every exported name exists, every error class among them (`from dicta import *` works).
    assert all(hasattr(dicta, name) for name in dicta.__all__)
    assert set(dicta.errors.__all__) <= set(dicta.__all__)


def stream(engine: dicta.Engine, samples: np.ndarray, block: int, **options) -> list:
    with engine.open_session(**options) as s:
        events = []
        for i in range(0, len(samples), block):
            events += s.feed(samples[i : i + block])
        events += s.end()
    return events


def finals(events: list) -> str:
    return " ".join(e["text"].strip() for e in events if e["type"] == "final").strip()


def test_streaming_is_the_same_for_any_block_size(engine):
    samples = dicta.decode_audio(str(JFK))
    small = stream(engine, samples, 1000)
    large = stream(engine, samples, 64000)
    assert small == large
    assert any(e["type"] == "partial" for e in small)
    assert {"type", "text", "start", "end", "words"} <= set(small[0])
    text = finals(small).lower()
    for phrase in ("fellow americans", "your country", "do for you"):
        assert phrase in text, text


def test_sessions_take_their_own_prompt_and_hotwords(engine):
    samples = dicta.decode_audio(str(JFK))
    plain = finals(stream(engine, samples, 16000))
    prompted = finals(stream(engine, samples, 16000, initial_prompt="HELLO. THIS IS ALL IN CAPITALS."))
    hot = finals(stream(engine, samples, 16000, hotwords="Kennedy, Americans!", language="en"))
    assert prompted != plain and hot != plain, (plain, prompted, hot)
    # An English-only model refuses another language; an unknown option is named.
    with pytest.raises(dicta.InvalidInput, match="English-only"):
        engine.open_session(language="de")
    with pytest.raises(dicta.InvalidInput, match="translate"):
        engine.open_session(task="translate")
    with pytest.raises(dicta.InvalidInput, match="hotword"):
        engine.open_session(hotword="x")


def vad_dir() -> str:
    d = os.environ.get("DICTA_TEST_VAD_DIR")
    if d:
        return d
    d = Path.home() / ".cache" / "dicta" / "models" / "silero-vad"
    if not (d / "silero_vad_v6.onnx").is_file():
        pytest.skip("no Silero VAD (set DICTA_TEST_VAD_DIR)")
    return str(d)


def test_sessions_end_utterances_on_silence(engine):
    # JFK's sentence, 0.5 s of silence, then a second one; with `vad=True` the first sentence is
    # all final before any of the second is fed.
    jfk = dicta.decode_audio(str(JFK))
    audio = np.concatenate([jfk, np.zeros(8000, dtype=np.float32), jfk])
    second = len(jfk) + 8000
    with_vad = dicta.Engine(model_dir(), threads=2, vad_model=vad_dir())
    with with_vad.open_session(vad=True, vad_parameters={"min_silence_duration_ms": 300}) as s:
        fed, first_done = 0, None
        events = []
        for i in range(0, len(audio), 1600):
            events += s.feed(audio[i : i + 1600])
            fed = min(i + 1600, len(audio))
            text = finals(events).lower()
            if first_done is None and text.rstrip(".!? ").endswith("for your country"):
                first_done = fed
        events += s.end()
    assert first_done is not None and first_done <= second, (first_done, second, finals(events))
    assert finals(events).lower().count("your country") == 4, finals(events)
    # Options are checked by name and range; an engine without a detector refuses `vad=True`.
    with pytest.raises(dicta.InvalidInput, match="min_silence"):
        with_vad.open_session(vad=True, vad_parameters={"min_silence": 300})
    with pytest.raises(dicta.InvalidInput, match="threshold"):
        with_vad.open_session(vad=True, vad_parameters={"threshold": 2.0})
    with pytest.raises(dicta.InvalidInput, match="voice activity detector"):
        engine.open_session(vad=True)


def test_transcribe_stops_when_cancelled(engine):
    # 220 s of speech, cancelled from the first segments' event: the work stops at the next
    # model pass (well before the end), and the input's result says so.
    audio = np.tile(dicta.decode_audio(str(JFK)), 20)
    stop = dicta.Cancel()
    seen = []

    def on_event(e):
        seen.append(e)
        if e["type"] == "segments":
            stop.cancel()

    out = engine.transcribe(("long", audio, 16000), on_event=on_event, cancel=stop)
    r = out["results"][0]
    assert stop.cancelled and r["error"]["type"] == "timeout", r.get("error")
    done = max((e["seconds"] for e in seen if e["type"] == "audio"), default=0.0)
    assert done < 100, seen
    # A flag that is never set changes nothing.
    out = engine.transcribe(str(JFK), cancel=dicta.Cancel())
    assert out["results"][0]["error"] is None and "country" in out["results"][0]["text"]


def test_sessions_in_threads_share_the_worker(engine):
    clips = [dicta.decode_audio(p) for p in (str(JFK), str(WAV_16K), str(MP3))]
    alone = [stream(engine, c, 4000) for c in clips]
    together = [None] * len(clips)

    def run(i):
        together[i] = stream(engine, clips[i], 4000)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clips))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone


def test_session_events_are_the_websockets(engine):
    """The same recording through a Python session and through `dicta serve`'s /v1/stream."""
    ws_client = pytest.importorskip("websockets.sync.client")
    samples, rate = read_wav(DATA / "openai_whisper" / "jfk.16k.wav")
    assert rate == 16000
    mine = stream(engine, samples, 3200)
    assert BIN.is_file(), f"no dicta binary at {BIN}"
    server = subprocess.Popen(
        [str(BIN), "serve", "--port", "0", "--no-vad", "--model", model_dir()],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base = server.stdout.readline().strip().removeprefix("listening on ")
        import urllib.request

        deadline = time.time() + 120
        while True:
            try:
                if urllib.request.urlopen(base + "/readyz").status == 200:
                    break
            except OSError:
                pass
            assert time.time() < deadline, "the server never became ready"
            time.sleep(0.2)
        pcm = (samples * 32768.0).round().astype("<i2").tobytes()
        theirs = []
        with ws_client.connect(base.replace("http://", "ws://") + "/v1/stream", max_size=None) as ws:
            assert json.loads(ws.recv(timeout=30))["type"] == "ready"
            for i in range(0, len(pcm), 6400):
                ws.send(pcm[i : i + 6400])
            ws.send(json.dumps({"type": "end"}))
            while True:
                m = json.loads(ws.recv(timeout=120))
                if m["type"] == "done":
                    break
                if m["type"] == "lag":  # a notice that a busy server is behind real time
                    continue
                assert m["type"] in ("partial", "final"), m
                theirs.append(m)
    finally:
        server.terminate()
        server.wait(30)
    assert [e for e in mine if e["type"] == "final"] == [e for e in theirs if e["type"] == "final"]
    assert mine == theirs


def test_fetching_by_name_is_the_clis_cache():
    # With DICTA_HOME holding the model (scripts/test.sh), a name needs no network.
    home = os.environ.get("DICTA_HOME")
    if not home or not (Path(home) / "models" / "tiny.en" / "model.bin").is_file():
        pytest.skip("DICTA_HOME holds no fetched tiny.en")
    assert dicta.fetch_model("tiny.en") == str(Path(home) / "models" / "tiny.en")
    e = dicta.Engine("tiny.en", threads=1)
    assert e.family == "whisper" and e.model_dir == str(Path(home) / "models" / "tiny.en")


def test_the_gil_is_released_while_the_engine_works(engine):
    # A pure-Python thread keeps running while another thread transcribes: with the GIL held
    # for the whole call it would stay at (almost) zero until the call returns.
    ticks = []
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    result = {}

    def work():
        result["out"] = engine.transcribe([str(JFK)] * 2, beam_size=1)

    w = threading.Thread(target=work)
    start = time.monotonic()
    w.start()
    c = threading.Thread(target=count)
    c.start()
    w.join()
    end = time.monotonic()
    done.set()
    c.join()
    during = [t for t in ticks if start < t < end]
    assert result["out"]["results"][0]["error"] is None
    assert len(during) >= 20, f"{len(during)} ticks in {end - start:.2f} s of transcription"


@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None and not os.environ.get("DICTA_TEST_RAY"),
    reason="ray is not installed (DICTA_TEST_RAY=1 makes it required, as scripts/test.sh does)",
)
def test_ray_example_writes_the_clis_results(tmp_path):
    fs = files()
    manifest = tmp_path / "manifest.json"
    # Paths relative to the manifest, as the CLI reads them.
    entries = [{"id": f"clip-{i}", "audio": os.path.relpath(f, tmp_path)} for i, f in enumerate(fs)]
    entries.append({"id": "broken", "audio": "missing.wav"})
    manifest.write_text(json.dumps(entries))
    out = tmp_path / "out.jsonl"
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ray_transcribe.py"), str(manifest), str(out), "--actors", "2", "--model", model_dir(), "--beam-size", "1", "--rows-per-batch", "2"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 1, run.stderr[-3000:]  # one input fails, the job goes on
    lines = [json.loads(l) for l in out.read_text().splitlines()]
    theirs = cli("--beam-size", "1", "--manifest", str(manifest))["results"]
    assert lines == theirs
    assert lines[-1]["error"]["type"] == "io"
    summary = json.loads(run.stderr.strip().splitlines()[-1])
    assert summary["inputs"] == len(entries) and summary["failed"] == 1 and summary["actors"] == 2
