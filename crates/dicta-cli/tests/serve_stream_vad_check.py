#!/usr/bin/env python3
"""Checks VAD endpointing of `dicta serve`'s WebSocket streams (GET /v1/stream) with the
`websockets` client.

The audio: a mono 16-bit 16 kHz WAV (JFK's sentence) followed by 0.5 s of silence, sent in 100 ms
frames as fast as the socket takes them. Checks:

- `?vad=true&vad_parameters={"min_silence_duration_ms":300}` is acknowledged in the `config`
  answer (`vad`, and `vad_parameters` with the endpointing defaults for the rest);
- with it, the sentence's last word ("country") arrives in a final *before* the client sends
  `end`: the detector ended the utterance on the silence (the client waits for it);
- with `vad=false` in a `config` message, nothing makes "country" final until `end` (the last
  word waits for a second decode to agree, and the silence is too short for one), and then it is;
- both streams' finals match `--expect` within `--max-word-errors` word edits;
- a bad `vad_parameters` in a `config` message gets an `invalid_input` error naming the field,
  and the stream stays usable;
- with `--no-detector` (a server started `--no-vad`), `?vad=true` is refused with 400 naming the
  missing detector.

Run by crates/dicta-cli/tests/serve_e2e.rs; usable by hand:
    python3 serve_stream_vad_check.py --url ws://127.0.0.1:8000/v1/stream --wav jfk.16k.wav \
        --expect "the offline text"
"""

import argparse
import asyncio
import json
import sys
import urllib.parse
import wave

import websockets

from serve_stream_check import word_edits, words_of


def ends_sentence(text):
    """Whether a final ends with the sentence's last word ("country", said twice in it)."""
    return words_of(text)[-1:] == ["country"]


async def next_message(ws, timeout=60):
    msg = json.loads(await asyncio.wait_for(ws.recv(), timeout))
    if msg["type"] == "error":
        raise AssertionError(f"server error: {msg}")
    return msg


async def stream(url, pcm, config, wait_for_final):
    """Streams `pcm` after a `config` message with `config`'s fields; returns (finals before
    `end`, finals after it). With `wait_for_final`, waits (up to 60 s) for a final holding
    "country" before sending `end`; else waits 5 s for any messages first."""
    async with websockets.connect(url, max_size=None) as ws:
        assert (await next_message(ws))["type"] == "ready"
        await ws.send(json.dumps({"type": "config", "encoding": "i16_le", "sample_rate": 16000, **config}))
        ack = await next_message(ws)
        assert ack["type"] == "config", ack
        step = 1600 * 2
        for i in range(0, len(pcm), step):
            await ws.send(pcm[i : i + step])
        before = []
        if wait_for_final:
            while not any(ends_sentence(t) for t in before):
                msg = await next_message(ws)
                if msg["type"] == "final":
                    before.append(msg["text"])
        else:
            try:
                while True:
                    msg = await next_message(ws, timeout=5)
                    if msg["type"] == "final":
                        before.append(msg["text"])
            except asyncio.TimeoutError:
                pass
        await ws.send(json.dumps({"type": "end"}))
        after = []
        while True:
            msg = await next_message(ws)
            if msg["type"] == "final":
                after.append(msg["text"])
            if msg["type"] == "done":
                return ack, before, after


async def run(args):
    if args.no_detector:
        try:
            async with websockets.connect(f"{args.url}?vad=true"):
                raise AssertionError("a stream asking for VAD endpointing opened on a server without a detector")
        except websockets.exceptions.InvalidStatus as e:
            assert e.response.status_code == 400, e.response.status_code
            body = e.response.body.decode()
            assert "voice activity detector" in body, body
            print(f"refused: {body}")
        return
    with wave.open(args.wav, "rb") as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1 and w.getframerate() == 16000, "a 16 kHz mono 16-bit WAV"
        pcm = w.readframes(w.getnframes()) + b"\0\0" * 8000
    query = urllib.parse.urlencode({"vad": "true", "vad_parameters": json.dumps({"min_silence_duration_ms": 300})})
    ack, before, after = await stream(f"{args.url}?{query}", pcm, {}, True)
    assert ack.get("vad") is True, ack
    params = ack.get("vad_parameters")
    assert params and params["min_silence_duration_ms"] == 300 and params["speech_pad_ms"] == 300, ack
    print(f"vad: final before end {before!r}, after end {after!r}")
    edits = word_edits(words_of(" ".join(before + after)), words_of(args.expect))
    assert edits <= args.max_word_errors, f"vad: {edits} word edits: {before + after!r}"
    ack, before, after = await stream(args.url, pcm, {"vad": False}, False)
    assert ack.get("vad") is False, ack
    print(f"plain: finals before end {before!r}, after end {after!r}")
    assert not any(ends_sentence(t) for t in before), "the last word was final before end without VAD"
    assert any(ends_sentence(t) for t in after), after
    edits = word_edits(words_of(" ".join(before + after)), words_of(args.expect))
    assert edits <= args.max_word_errors, f"plain: {edits} word edits"
    # A bad option is refused by name; the same socket then streams normally.
    async with websockets.connect(args.url, max_size=None) as ws:
        assert (await next_message(ws))["type"] == "ready"
        await ws.send(json.dumps({"type": "config", "vad_parameters": {"min_silence": 3}}))
        msg = json.loads(await ws.recv())
        assert msg["type"] == "error" and msg["error"]["type"] == "invalid_input", msg
        assert "min_silence" in msg["error"]["message"], msg
        await ws.send(json.dumps({"type": "config", "vad": True}))
        assert (await next_message(ws)).get("vad") is True
        print(f"bad option: {msg['error']['message']}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="ws://host:port/v1/stream")
    p.add_argument("--wav", help="a 16 kHz mono 16-bit WAV")
    p.add_argument("--expect", help="the offline transcript of the same file")
    p.add_argument("--max-word-errors", type=int, default=3)
    p.add_argument("--no-detector", action="store_true", help="the server runs --no-vad")
    args = p.parse_args()
    if not args.no_detector and (args.wav is None or args.expect is None):
        p.error("--wav and --expect are required (or --no-detector)")
    try:
        asyncio.run(run(args))
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
