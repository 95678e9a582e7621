#!/usr/bin/env python3
"""Drives `dicta serve --grpc-port` with NVIDIA's own Riva client (PyPI nvidia-riva-client).

Run by tests/serve_grpc.rs against a real server; exits non-zero with a message on the first
check that fails. The expected texts are the server's own HTTP answers for the same files.
"""

import argparse
import json
import re
import shutil
import subprocess
import threading
import time
import wave

import grpc
import riva.client

try:
    import audioop  # G.711 encoders and channel tools of the standard library (to 3.12)
except ImportError:
    audioop = None
from riva.client.proto import health_pb2, health_pb2_grpc
from riva.client.proto import riva_asr_pb2 as rasr
from riva.client.proto import riva_asr_pb2_grpc as rasr_srv
from checks import check, words



def word_errors(ref, hyp):
    """Levenshtein distance between the word sequences."""
    r, h = words(ref), words(hyp)
    d = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        prev, d[0] = d[0], i
        for j, hw in enumerate(h, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (rw != hw))
    return d[len(h)]



def code_of(f):
    try:
        f()
    except grpc.RpcError as e:
        return e.code(), e.details(), dict(e.trailing_metadata() or ())
    return grpc.StatusCode.OK, "", {}


def offline_text(resp):
    return " ".join(r.alternatives[0].transcript for r in resp.results if r.alternatives)


def g711_and_stereo(asr, a, frames, rate, text):
    """Stereo interleaved (the same voice on both channels) == mono; G.711 at 8 kHz ≈ the text."""
    # Stereo interleaved (the same voice on both channels) == mono.
    stereo = audioop.tostereo(frames, 2, 1, 1)
    st_cfg = riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=rate, audio_channel_count=2)
    check(offline_text(asr.offline_recognize(stereo, st_cfg)) == text, "2 interleaved channels == mono")

    # G.711 μ-law and A-law at 8 kHz, as telephony sends.
    with wave.open(a.wav16, "rb") as w:
        pcm16 = w.readframes(w.getnframes())
    pcm8, _ = audioop.ratecv(pcm16, 2, 1, 16000, 8000, None)
    for name, enc, coded in [
        ("MULAW", riva.client.AudioEncoding.MULAW, audioop.lin2ulaw(pcm8, 2)),
        ("ALAW", riva.client.AudioEncoding.ALAW, audioop.lin2alaw(pcm8, 2)),
    ]:
        c = riva.client.RecognitionConfig(encoding=enc, sample_rate_hertz=8000)
        t = offline_text(asr.offline_recognize(coded, c))
        check(word_errors(a.expect16, t) <= 3, f"Recognize({name} 8 kHz) ≈ HTTP text\n{t!r}")


def automatic_punctuation(asr, a, frames, rate):
    """enable_automatic_punctuation: Whisper's own text with it; without it (the field's and the
    client's default) the same words in lower case without punctuation, in transcripts, word
    offsets and streamed finals alike, as Riva's models write before its punctuation model."""
    def cfg(punctuate):
        return riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=rate,
                                             language_code="en-US", enable_word_time_offsets=True,
                                             enable_automatic_punctuation=punctuate)
    bare = re.compile(r"[a-z0-9' ]*")
    punctuated = asr.offline_recognize(frames, cfg(True))
    plain = asr.offline_recognize(frames, cfg(False))
    p, u = offline_text(punctuated), offline_text(plain)
    check(p == a.expect22, f"with enable_automatic_punctuation: the CLI's text\n{p!r}")
    check(re.search(r"[A-Z,.]", p) and bare.fullmatch(u) and words(u) == words(p),
          f"without it: the same words, lower case, no punctuation\n{u!r}\n{p!r}")
    for r in plain.results:
        alt = r.alternatives[0]
        check(" ".join(w.word for w in alt.words) == alt.transcript, f"its words make its transcript: {alt.transcript!r}")

    def streamed(punctuate):
        scfg = riva.client.StreamingRecognitionConfig(config=cfg(punctuate), interim_results=True)
        chunks = [frames[i:i + 4410] for i in range(0, len(frames), 4410)]
        rs = [r for resp in asr.streaming_response_generator(audio_chunks=iter(chunks), streaming_config=scfg)
              for r in resp.results]
        return [r.alternatives[0].transcript for r in rs]
    s_plain, s_punct = streamed(False), streamed(True)
    check(s_plain and all(bare.fullmatch(t) for t in s_plain), f"streamed results without it are bare: {s_plain[-2:]!r}")
    check(any(re.search(r"[A-Z,.]", t) for t in s_punct), f"streamed results with it keep Whisper's: {s_punct[-2:]!r}")


def separate_channels(asr, a):
    """enable_separate_recognition_per_channel: each channel of a stereo recording (a different
    utterance on each) recognized on its own, from the WAV file's bytes and from its raw
    interleaved frames, results tagged 1 and 2 with the CLI's `--channels split` texts; without it
    one mixed result set on channel 1; a stream refuses it."""
    with wave.open(a.stereo, "rb") as w:
        rate, n, frames = w.getframerate(), w.getnchannels(), w.readframes(w.getnframes())
    with open(a.stereo, "rb") as f:
        data = f.read()

    def per_channel(resp):
        out = {}
        for r in resp.results:
            out.setdefault(r.channel_tag, []).append(r.alternatives[0].transcript)
        return {k: " ".join(v) for k, v in out.items()}

    want = {1: a.expect_left, 2: a.expect_right}
    cfg = riva.client.RecognitionConfig(language_code="en-US", enable_separate_recognition_per_channel=True,
                                        enable_automatic_punctuation=True)
    got = per_channel(asr.offline_recognize(data, cfg))
    check(got == want, f"Recognize(stereo WAV file) per channel == the CLI's --channels split\n{got!r}\n{want!r}")
    raw = riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=rate,
                                        audio_channel_count=n, language_code="en-US",
                                        enable_separate_recognition_per_channel=True, enable_automatic_punctuation=True)
    got = per_channel(asr.offline_recognize(frames, raw))
    check(got == want, f"Recognize(raw interleaved stereo) per channel == the CLI's --channels split\n{got!r}")
    raw.enable_separate_recognition_per_channel = False
    mixed = per_channel(asr.offline_recognize(frames, raw))
    check(list(mixed) == [1], f"without it, one mixed channel: {mixed!r}")
    raw.enable_separate_recognition_per_channel = True
    scfg = riva.client.StreamingRecognitionConfig(config=raw, interim_results=False)
    code, details, _ = code_of(lambda: list(asr.streaming_response_generator(audio_chunks=iter([frames[:6400]]), streaming_config=scfg)))
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "enable_separate_recognition_per_channel" in details,
          f"StreamingRecognize per channel -> {code} {details}")


def endpointing(asr, a):
    """Riva's `endpointing_config` ends a stream's utterance where the server's voice activity
    detector hears silence: JFK's sentence and 0.5 s of silence, then the request stream is held
    open until its last word comes back final (or 30 s pass). Without it the last word only comes
    after the requests end. Riva's frame-fraction thresholds are refused by name."""
    with wave.open(a.wav16, "rb") as w:
        pcm = w.readframes(w.getnframes()) + b"\0\0" * 8000
    last = words(a.expect16)[-1]

    def run(endpoint):
        cfg = riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=16000,
                                            language_code="en-US")
        if endpoint:
            riva.client.add_endpoint_parameters_to_config(cfg, 0, 0, 300, 0, 0, 0)
        scfg = riva.client.StreamingRecognitionConfig(config=cfg, interim_results=False)
        done, held = threading.Event(), {}

        def chunks():
            for i in range(0, len(pcm), 3200):
                yield pcm[i : i + 3200]
            held["final_before_end"] = done.wait(30 if endpoint else 5)

        texts = []
        for resp in asr.streaming_response_generator(audio_chunks=chunks(), streaming_config=scfg):
            for r in resp.results:
                if r.is_final:
                    texts.append(r.alternatives[0].transcript)
                    if words(texts[-1])[-1:] == [last]:
                        done.set()
        return texts, held.get("final_before_end")

    texts, early = run(True)
    check(early, f"endpointing_config: the last word final before the requests end ({texts!r})")
    check(word_errors(a.expect16, " ".join(texts)) <= 3, f"endpointed finals {texts!r}")
    texts, early = run(False)
    check(not early and words(" ".join(texts))[-1:] == [last], f"without endpointing the last word comes at the end ({texts!r})")
    cfg = riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=16000)
    riva.client.add_endpoint_parameters_to_config(cfg, 0, 0.5, 300, 0, 0, 0)
    scfg = riva.client.StreamingRecognitionConfig(config=cfg)
    code, details, _ = code_of(lambda: list(asr.streaming_response_generator(audio_chunks=iter([pcm[:3200]]), streaming_config=scfg)))
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "start_threshold" in details, f"start_threshold -> {code} {details}")


def profanity_filter(asr, a):
    """`profanity_filter`: the profane words of the same text as first letter + asterisks (one
    per letter), in Recognize's transcript and words and in streamed finals; other words as
    they were; off, the plain text."""
    cfg = riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.LINEAR_PCM, language_code="en-US",
                                        enable_word_time_offsets=True)
    riva.client.add_audio_file_specs_to_config(cfg, a.profane)
    with open(a.profane, "rb") as f:
        data = f.read()
    plain = offline_text(asr.offline_recognize(data, cfg))
    check(word_errors(a.expect_profane, plain) == 0, f"profanity_filter off: the CLI's text\n{plain!r}\n{a.expect_profane!r}")
    cfg.profanity_filter = True
    resp = asr.offline_recognize(data, cfg)
    filtered = offline_text(resp)

    def starred(p, f):
        pw, fw = p.split(), f.split()
        pairs = list(zip(pw, fw))
        ok = len(pw) == len(fw) and all(
            x == y or (y[0] == x[0] and re.fullmatch(r"\*+\W*", y[1:]) and len(y) == len(x)) for x, y in pairs)
        return ok, sum(x != y for x, y in pairs)

    ok, n = starred(plain, filtered)
    check(ok and n >= 2, f"Recognize with profanity_filter: {n} words starred, the rest kept\n{filtered!r}\n{plain!r}")
    ws = [w.word for r in resp.results for w in r.alternatives[0].words]
    check(sum("*" in w for w in ws) == n, f"the words carry the same stars: {ws}")
    scfg = riva.client.StreamingRecognitionConfig(config=cfg, interim_results=True)
    finals, interims = [], []
    with riva.client.AudioChunkFileIterator(a.profane, 1600) as chunks:
        for response in asr.streaming_response_generator(audio_chunks=chunks, streaming_config=scfg):
            for r in response.results:
                (finals if r.is_final else interims).append(r.alternatives[0].transcript)
    streamed = " ".join(finals)
    check("*" in streamed and not re.search(r"shit|asshole|bastard", " ".join(finals + interims), re.I),
          f"streamed finals and interims are filtered\n{streamed!r}")


def boosting_and_custom_configuration(asr, a, frames, rate):
    """Word boosting and custom_configuration, set with the Riva client's own helpers, give the
    CLI's texts for --hotwords and the same decoding flags; bad ones are refused by name."""

    def raw_cfg():
        return riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=rate,
                                             language_code="en-US", enable_automatic_punctuation=True)

    phrases = [p.strip() for p in a.phrases.split(",")]
    cfg = raw_cfg()
    riva.client.add_word_boosting_to_config(cfg, phrases, 20.0)
    text = offline_text(asr.offline_recognize(frames, cfg))
    check(text == a.expect_hot, f"Recognize with speech_contexts == the CLI with --hotwords\n{text!r}\n{a.expect_hot!r}")
    cfg = raw_cfg()
    riva.client.add_custom_configuration_to_config(cfg, a.custom)
    text = offline_text(asr.offline_recognize(frames, cfg))
    check(text == a.expect_custom, f"Recognize with custom_configuration {a.custom} == the CLI's flags\n{text!r}\n{a.expect_custom!r}")
    # A list value, set on the map itself (the helper splits at commas).
    cfg = raw_cfg()
    cfg.custom_configuration.update({"temperature": "[0.0]", "max_new_tokens": "5"})
    text = offline_text(asr.offline_recognize(frames, cfg))
    check(text == a.expect_custom, f"custom_configuration with a JSON list\n{text!r}")

    for what, edit, needle in [
        ("a negative boost", lambda c: riva.client.add_word_boosting_to_config(c, ["x"], -10.0), "negative boost"),
        ("beam_size 0", lambda c: c.custom_configuration.update({"beam_size": "0"}), "beam_size"),
        ("an unknown key", lambda c: c.custom_configuration.update({"beam_sise": "2"}), "beam_sise"),
    ]:
        cfg = raw_cfg()
        edit(cfg)
        code, details, meta = code_of(lambda: asr.offline_recognize(frames, cfg))
        check(code == grpc.StatusCode.INVALID_ARGUMENT and needle in details and meta.get("dicta-error-type") == "invalid_input",
              f"{what} -> {code} {details} {meta}")
    # Streaming sessions take word boosting and their own prompt and hotwords: the boosted
    # stream differs from the plain one and equals the stream given the same phrases as
    # custom_configuration's hotwords; options a stream cannot take per session are refused.
    def streamed(edit):
        scfg = riva.client.StreamingRecognitionConfig(config=raw_cfg(), interim_results=False)
        edit(scfg)
        chunks = [frames[i:i + 4410] for i in range(0, len(frames), 4410)]
        rs = [r for resp in asr.streaming_response_generator(audio_chunks=iter(chunks), streaming_config=scfg) for r in resp.results]
        return " ".join(r.alternatives[0].transcript for r in rs if r.is_final)

    plain = streamed(lambda c: None)
    boosted = streamed(lambda c: riva.client.add_word_boosting_to_config(c, phrases, 20.0))
    check(boosted != plain, f"StreamingRecognize with speech_contexts differs from without\n{boosted!r}")
    as_custom = streamed(lambda c: c.config.custom_configuration.update({"hotwords": ", ".join(phrases)}))
    check(as_custom == boosted, f"stream with custom_configuration hotwords == with speech_contexts\n{as_custom!r}\n{boosted!r}")
    for what, edit, needle in [
        ("a negative boost", lambda c: riva.client.add_word_boosting_to_config(c, ["x"], -10.0), "negative boost"),
        ("beam_size per stream", lambda c: c.config.custom_configuration.update({"beam_size": "2"}), "beam_size"),
    ]:
        code, details, _ = code_of(lambda: streamed(edit))
        check(code == grpc.StatusCode.INVALID_ARGUMENT and needle in details, f"StreamingRecognize with {what} -> {code} {details}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uri", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--wav16", required=True, help="a 16 kHz mono 16-bit WAV")
    ap.add_argument("--expect16", required=True, help="the CLI's text for --wav16")
    ap.add_argument("--wav22", required=True, help="a 22.05 kHz mono 16-bit WAV")
    ap.add_argument("--expect22", required=True)
    ap.add_argument("--phrases", required=True, help="boosted phrases, comma-separated")
    ap.add_argument("--expect-hot", required=True, help="the CLI's text for --wav22 with --hotwords PHRASES")
    ap.add_argument("--custom", required=True, help="custom_configuration as the Riva client's key:value,…")
    ap.add_argument("--expect-custom", required=True, help="the CLI's text for --wav22 with the same options")
    ap.add_argument("--stereo", required=True, help="a 16-bit stereo WAV, a different utterance on each channel")
    ap.add_argument("--expect-left", required=True, help="the CLI's text of its first channel (--channels split)")
    ap.add_argument("--expect-right", required=True, help="the CLI's text of its second channel")
    ap.add_argument("--profane", required=True, help="a WAV of speech with profanities")
    ap.add_argument("--expect-profane", required=True, help="the CLI's text for --profane")
    a = ap.parse_args()

    auth = riva.client.Auth(uri=a.uri, metadata_args=[["authorization", f"Bearer {a.key}"]])
    asr = riva.client.ASRService(auth)

    # Health, without the key (as orchestrator probes).
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(a.uri))
    h = health.Check(health_pb2.HealthCheckRequest(service=""))
    check(h.status == health_pb2.HealthCheckResponse.SERVING, f"health SERVING ({h})")

    cfg = asr.stub.GetRivaSpeechRecognitionConfig(rasr.RivaSpeechRecognitionConfigRequest(), metadata=auth.get_auth_metadata())
    names = [c.model_name for c in cfg.model_config]
    check(a.model in names, f"config lists the model: {names}")

    # Recognize: the WAV file's bytes as they are (the client's transcribe_file_offline way).
    config = riva.client.RecognitionConfig(
        encoding=riva.client.AudioEncoding.LINEAR_PCM,
        language_code="en-US",
        max_alternatives=1,
        enable_automatic_punctuation=True,
        enable_word_time_offsets=True,
    )
    riva.client.add_audio_file_specs_to_config(config, a.wav16)
    with open(a.wav16, "rb") as f:
        data = f.read()
    resp = asr.offline_recognize(data, config)
    text = offline_text(resp)
    check(word_errors(a.expect16, text) == 0, f"Recognize(WAV file) == the CLI's text\n{text!r}\n{a.expect16!r}")
    ws = [w for r in resp.results for w in r.alternatives[0].words]
    check(len(ws) == len(words(text)) or len(ws) >= len(words(text)) - 2, f"{len(ws)} word offsets for {len(words(text))} words")
    check(all(0 <= w.start_time <= w.end_time for w in ws) and ws[-1].end_time > 1000, "word offsets are milliseconds, ordered")
    check(all(ws[i].start_time <= ws[i + 1].start_time for i in range(len(ws) - 1)), "words in time order")
    check(resp.results[-1].alternatives[0].language_code == ["en"], "language on the alternative")

    # Recognize: the same speech as an Ogg/Opus file (encoding OGGOPUS), when ffmpeg is here to
    # make one; lossy, so within 10% WER of the WAV's text rather than equal.
    if shutil.which("ffmpeg"):
        ogg = subprocess.run(
            ["ffmpeg", "-hide_banner", "-loglevel", "error", "-i", a.wav16, "-c:a", "libopus", "-b:a", "48k", "-f", "ogg", "pipe:1"],
            check=True, stdout=subprocess.PIPE,
        ).stdout
        opus_cfg = riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.OGGOPUS, language_code="en-US")
        text = offline_text(asr.offline_recognize(ogg, opus_cfg))
        wer = word_errors(a.expect16, text) / max(1, len(words(a.expect16)))
        check(wer <= 0.10, f"Recognize(Ogg/Opus, OGGOPUS) within 10% WER of the WAV's text ({wer:.3f})\n{text!r}\n{a.expect16!r}")
    else:
        print("note: no ffmpeg: the Ogg/Opus Recognize check is skipped")

    # Recognize: headerless frames at 22.05 kHz (resampled by the server).
    with wave.open(a.wav22, "rb") as w:
        rate, frames = w.getframerate(), w.readframes(w.getnframes())
    raw_cfg = riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=rate, language_code="en-US")
    text = offline_text(asr.offline_recognize(frames, raw_cfg))
    check(word_errors(a.expect22, text) == 0, f"Recognize(raw 22.05 kHz PCM) == the CLI's text\n{text!r}\n{a.expect22!r}")

    boosting_and_custom_configuration(asr, a, frames, rate)
    automatic_punctuation(asr, a, frames, rate)
    separate_channels(asr, a)
    endpointing(asr, a)
    profanity_filter(asr, a)

    if audioop is None:
        print("note: no audioop (Python >= 3.13): stereo and G.711 checks skipped")
    else:
        g711_and_stereo(asr, a, frames, rate, text)

    # StreamingRecognize with interim results, 100 ms chunks, as the client's examples stream.
    sconfig = riva.client.StreamingRecognitionConfig(
        config=riva.client.RecognitionConfig(
            encoding=riva.client.AudioEncoding.LINEAR_PCM,
            language_code="en-US",
            enable_word_time_offsets=True,
        ),
        interim_results=True,
    )
    riva.client.add_audio_file_specs_to_config(sconfig, a.wav22)
    finals, interims = [], 0
    with riva.client.AudioChunkFileIterator(a.wav22, 2205) as chunks:
        for response in asr.streaming_response_generator(audio_chunks=chunks, streaming_config=sconfig):
            for r in response.results:
                if r.is_final:
                    finals.append(r)
                else:
                    interims += 1
    streamed = " ".join(r.alternatives[0].transcript for r in finals)
    check(interims > 0, f"{interims} interim results before the finals")
    wer = word_errors(a.expect22, streamed) / max(1, len(words(a.expect22)))
    check(finals and wer <= 0.10, f"streamed finals within 10% WER of the CLI ({wer:.3f})\n{streamed!r}\n{a.expect22!r}")
    sw = [w for r in finals for w in r.alternatives[0].words]
    check(sw and all(w.start_time <= w.end_time for w in sw) and sw[-1].end_time > 5000, "streamed word offsets")
    check(all(r.stability == 1.0 for r in finals) and finals[-1].audio_processed > 9.0, "finals: stability 1, audio_processed")

    # Interim results off: finals only.
    sconfig.interim_results = False
    riva.client.add_audio_file_specs_to_config(sconfig, a.wav16)
    with riva.client.AudioChunkFileIterator(a.wav16, 4000) as chunks:
        rs = [r for resp in asr.streaming_response_generator(audio_chunks=chunks, streaming_config=sconfig) for r in resp.results]
    check(rs and all(r.is_final for r in rs), "no interim results when not asked")

    # Errors: codes from the server's table, the library's messages, the kind in metadata.
    bad_key = riva.client.ASRService(riva.client.Auth(uri=a.uri, metadata_args=[["authorization", "Bearer wrong"]]))
    code, _, _ = code_of(lambda: bad_key.offline_recognize(data, config))
    check(code == grpc.StatusCode.UNAUTHENTICATED, f"wrong key -> {code}")
    no_key = riva.client.ASRService(riva.client.Auth(uri=a.uri))
    code, _, _ = code_of(lambda: no_key.offline_recognize(data, config))
    check(code == grpc.StatusCode.UNAUTHENTICATED, f"no key -> {code}")
    code, details, meta = code_of(lambda: asr.offline_recognize(b"\x01\x02\x03", riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.LINEAR_PCM)))
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "sample_rate_hertz" in details, f"raw audio without a rate -> {code} {details}")
    code, details, meta = code_of(lambda: asr.offline_recognize(b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk", config))
    check(code == grpc.StatusCode.INVALID_ARGUMENT and meta.get("dicta-error-type") in ("corrupt_input", "unsupported_format"), f"broken WAV -> {code} {details} {meta}")
    code, details, _ = code_of(lambda: asr.offline_recognize(data, riva.client.RecognitionConfig(model="no-such-model")))
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "unknown model" in details, f"unknown model -> {code} {details}")
    # OGGOPUS: the audio is an Ogg/Opus file; bytes that are not one are refused, naming it.
    code, details, meta = code_of(lambda: asr.offline_recognize(b"\x00\x00" * 16000, riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.OGGOPUS, sample_rate_hertz=16000)))
    check(code == grpc.StatusCode.INVALID_ARGUMENT and "OGGOPUS" in details and meta.get("dicta-error-type") == "corrupt_input", f"OGGOPUS without an Ogg page -> {code} {details} {meta}")
    # Over --max-audio-seconds (60): RESOURCE_EXHAUSTED, limit_exceeded.
    long_cfg = riva.client.RecognitionConfig(encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=16000)
    code, details, meta = code_of(lambda: asr.offline_recognize(b"\x00\x00" * 16000 * 70, long_cfg))
    check(code == grpc.StatusCode.RESOURCE_EXHAUSTED and meta.get("dicta-error-type") == "limit_exceeded" and "max_audio_seconds" in details, f"70 s over a 60 s limit -> {code} {details}")
    code, _, _ = code_of(lambda: asr.stub.Recognize(rasr.RecognizeRequest(config=config, audio=data), metadata=auth.get_auth_metadata(), timeout=0.001))
    check(code == grpc.StatusCode.DEADLINE_EXCEEDED, f"a client deadline -> {code}")

    # Full: with --max-streams 1, a second stream while one is open is RESOURCE_EXHAUSTED.
    hold = threading.Event()
    opened = threading.Event()

    def held_chunks():
        yield b"\x00\x00" * 1600
        opened.set()
        hold.wait(60)

    first = {}

    def run_first():
        first["n"] = sum(1 for _ in asr.streaming_response_generator(audio_chunks=held_chunks(), streaming_config=sconfig))

    t = threading.Thread(target=run_first)
    t.start()
    opened.wait(30)
    time.sleep(0.5)
    code, details, meta = code_of(lambda: list(asr.streaming_response_generator(audio_chunks=iter([b"\x00\x00" * 1600]), streaming_config=sconfig)))
    hold.set()
    t.join(60)
    check(code == grpc.StatusCode.RESOURCE_EXHAUSTED and meta.get("dicta-error-type") == "overloaded", f"second stream over max_streams -> {code} {details}")
    check("n" in first, "the first stream ended normally")

    # The server still answers correctly after all of that.
    check(word_errors(a.expect16, offline_text(asr.offline_recognize(data, config))) == 0, "still serving")
    print(json.dumps({"ok": True}))


if __name__ == "__main__":
    main()
