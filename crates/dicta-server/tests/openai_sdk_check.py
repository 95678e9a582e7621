#!/usr/bin/env python3
"""Checks a running Dicta server with the official `openai` Python SDK, unmodified.

    python3 -m pip install openai
    python3 crates/dicta-server/tests/openai_sdk_check.py --base-url http://127.0.0.1:PORT/v1 \
        [--api-key KEY] [--audio FILE.wav] [--expect "fellow americans"] [--echo] [--translate]

Exercises response_format json, text, srt, vtt and verbose_json (with word and segment
timestamp granularities), `stream=True` (server-sent deltas, then done), decoding options in `extra_body`, an undecodable upload (must raise BadRequestError) and, when
--api-key is given, a wrong key (must raise AuthenticationError). Exits non-zero on the first
failed check.

--expect TEXT   every transcript must contain TEXT (case-insensitive): use with a real model.
--echo          the server runs the echo test backend (crates/dicta-server/examples/echo_server.rs):
                the text must be exactly "transcribe {ms}ms {fnv1a:016x}" computed here from the
                WAV's 16-bit samples, which must be 16 kHz mono.
"""

import argparse
import os
import re
import sys
import wave

import openai
from openai import OpenAI

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_AUDIO = os.path.join(HERE, "..", "..", "..", "..", "shared", "data", "openai_whisper", "jfk.16k.wav")


def echo_text(path, task="transcribe"):
    """What the echo backend answers for a 16 kHz mono 16-bit WAV (see echo_backend.rs)."""
    with wave.open(path, "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, \
            "--echo needs a 16 kHz mono 16-bit WAV"
        frames = w.readframes(w.getnframes())
    h = 0xCBF29CE484222325
    n = len(frames) // 2
    for i in range(n):
        s = int.from_bytes(frames[2 * i:2 * i + 2], "little", signed=True)
        for b in (s & 0xFFFFFFFF).to_bytes(4, "little"):
            h ^= b
            h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{task} {n * 1000 // 16000}ms {h:016x}"


def words_of(text):
    """Lower-case words without punctuation, to compare texts that differ only in spacing."""
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)
    print(f"ok: {what}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--audio", default=DEFAULT_AUDIO)
    ap.add_argument("--model", default="whisper-1")
    ap.add_argument("--expect", default=None)
    ap.add_argument("--echo", action="store_true")
    ap.add_argument("--translate", action="store_true")
    ap.add_argument("--no-words", action="store_true",
                    help="the model gives no word timings yet (Whisper word alignment is not built): "
                         "check that verbose_json still answers, without words")
    args = ap.parse_args()

    client = OpenAI(base_url=args.base_url, api_key=args.api_key or "unused", max_retries=0)
    want = echo_text(args.audio) if args.echo else None

    def text_ok(text, what):
        check(isinstance(text, str) and text.strip() != "", f"{what}: non-empty text")
        if want is not None:
            check(text.strip() == want, f"{what}: echo text {text.strip()!r} == {want!r}")
        if args.expect:
            check(args.expect.lower() in text.lower(), f"{what}: contains {args.expect!r}")

    def transcribe(**kw):
        with open(args.audio, "rb") as f:
            return client.audio.transcriptions.create(model=args.model, file=f, **kw)

    r = transcribe()
    text_ok(r.text, "json")

    # stream=True: transcript.text.delta events, then transcript.text.done with the json text.
    events = list(transcribe(stream=True))
    check(len(events) >= 2 and events[-1].type == "transcript.text.done"
          and all(e.type == "transcript.text.delta" for e in events[:-1]), "stream=True: deltas, then done")
    check("".join(e.delta for e in events[:-1]) == events[-1].text == r.text,
          f"stream=True: the deltas make the json text\n{events[-1].text!r}\n{r.text!r}")

    r = transcribe(response_format="text")
    text_ok(r, "text")

    r = transcribe(response_format="srt")
    check(isinstance(r, str) and r.startswith("1\n") and " --> " in r, "srt: numbered cue with -->")
    text_ok(r.split("\n", 2)[2], "srt")

    r = transcribe(response_format="vtt")
    check(isinstance(r, str) and r.startswith("WEBVTT") and " --> " in r, "vtt: header and cue")

    r = transcribe(response_format="verbose_json", timestamp_granularities=["word", "segment"])
    text_ok(r.text, "verbose_json")
    check(r.task == "transcribe", "verbose_json: task")
    check(isinstance(r.language, str) and r.language != "", f"verbose_json: language {r.language!r}")
    check(r.duration > 0, f"verbose_json: duration {r.duration}")
    check(r.segments and all(s.start <= s.end for s in r.segments), "verbose_json: ordered segments")
    if not args.no_words:
        check(r.words and all(w.start <= w.end for w in r.words), f"verbose_json: {len(r.words or [])} timed words")
        # Within the audio and the span of the segments (10 ms of slack for rounding).
        lo, hi = r.segments[0].start - 0.01, min(r.segments[-1].end, r.duration) + 0.01
        check(all(lo <= w.start and w.end <= hi for w in r.words),
              f"verbose_json: words within [{lo:.2f}, {hi:.2f}] s")
        check(words_of(" ".join(w.word for w in r.words)) == words_of(r.text),
              "verbose_json: the words spell the text")
    check(all(r.words[i].start <= r.words[i + 1].start for i in range(len(r.words) - 1)),
          "verbose_json: words in time order")
    if want is not None:
        check(" ".join(w.word for w in r.words) == want, "verbose_json: echo words")

    # faster-whisper's decoding options through the SDK's `extra_body` (form fields; a list as
    # `name[]` fields): with a real model, 5 tokens give a strict prefix of the full text, and
    # suppressing token 843 (" And", JFK's first word in tiny.en's vocabulary) changes the text.
    if args.expect:
        text = transcribe().text
        full = words_of(text)
        short = words_of(transcribe(extra_body={"beam_size": 1, "max_new_tokens": 5}).text)
        check(0 < len(short) < len(full) and full[:len(short) - 1] == short[:-1],
              f"extra_body max_new_tokens=5: {short} starts {full}")
        r = transcribe(extra_body={"suppress_tokens": [-1, 843], "beam_size": 1})
        check(r.text.strip() != text.strip(), f"extra_body suppress_tokens: {r.text!r} differs")
    try:
        transcribe(extra_body={"beam_size": 999})
        check(False, "extra_body beam_size=999 raises BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "beam_size" in str(e),
              "extra_body beam_size=999 raises BadRequestError naming beam_size")

    try:
        client.audio.transcriptions.create(model=args.model, file=("bad.wav", b"not audio at all"))
        check(False, "undecodable upload raises BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "bad.wav" in str(e), "undecodable upload raises BadRequestError naming the file")

    if args.api_key:
        wrong = OpenAI(base_url=args.base_url, api_key=args.api_key + "-wrong", max_retries=0)
        try:
            with open(args.audio, "rb") as f:
                wrong.audio.transcriptions.create(model=args.model, file=f)
            check(False, "wrong API key raises AuthenticationError")
        except openai.AuthenticationError:
            check(True, "wrong API key raises AuthenticationError")

    if args.translate:
        with open(args.audio, "rb") as f:
            r = client.audio.translations.create(model=args.model, file=f)
        check(isinstance(r.text, str) and r.text.strip() != "", "translation: non-empty text")
        if args.echo:
            check(r.text.strip() == echo_text(args.audio, "translate"), "translation: echo text")

    print("all openai SDK checks passed")


if __name__ == "__main__":
    main()
