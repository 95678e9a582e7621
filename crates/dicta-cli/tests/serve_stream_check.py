#!/usr/bin/env python3
"""Streams a WAV file to `dicta serve`'s WebSocket endpoint (GET /v1/stream) the way a live
client would, and checks the protocol and the transcript.

The file is sent as i16_le PCM at its own sample rate (announced with a `config` message, so a
non-16 kHz file exercises the server's resampling) in 100 ms frames, paced at `--speed` times
real time, while a second task reads the server's messages. Then `{"type":"end"}` flushes the
utterance. Checks:

- the first message is `ready`; the `config` message is acknowledged with the settings;
- every event is `{"type":"partial"|"final","text","start","end","words"}` with
  0 <= start <= end and words inside [start, end] in order;
- partial events arrive before the stream is done (results are incremental, not all at the end);
- `lag` notices (`{"type":"lag","seconds","max_lag_seconds"}`, sent while the server is behind
  real time, e.g. on a busy machine) are well formed; they are counted, not failures;
- `done` comes after the last event;
- the finals, joined, match `--expect` (the offline transcript of the same file) within
  `--max-word-errors` word edits after normalisation (lower case, no punctuation).

With `--options-check NAME=VALUE …` it checks per-stream decoding options instead (`prompt`,
`hotwords`, `task`, `language`): the file is streamed as fast as the socket takes it without
options, then for each option with `?NAME=VALUE` in the query and with it in a `config` message
(acknowledged with it); the two ways give the same finals, each option changes them, and a
stream of the plain settings after them gives the plain finals again (options do not leak
between streams of one server).

Run by crates/dicta-cli/tests/serve_e2e.rs; usable by hand:
    python3 serve_stream_check.py --url ws://127.0.0.1:8000/v1/stream --wav clip.wav \
        --expect "the offline text" --max-word-errors 3
Exit status 0 on success; prints what it saw either way.
"""

import argparse
import asyncio
import json
import re
import sys
import urllib.parse
import wave

import websockets


def words_of(text):
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).split()


def word_edits(a, b):
    """Levenshtein distance between two word lists (substitutions, insertions, deletions)."""
    prev = list(range(len(b) + 1))
    for i, wa in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, wb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (wa != wb))
        prev = cur
    return prev[-1]


def check_event(ev):
    assert set(ev) == {"type", "text", "start", "end", "words"}, ev
    assert isinstance(ev["text"], str), ev
    assert 0.0 <= ev["start"] <= ev["end"] + 1e-6, ev
    last = ev["start"] - 1e-6
    for w in ev["words"]:
        assert {"word", "start", "end"} <= set(w), w
        assert w["start"] + 1e-6 >= last and w["start"] <= w["end"] + 1e-6, ev
        assert ev["start"] - 1e-6 <= w["start"] and w["end"] <= ev["end"] + 1e-6, ev
        last = w["start"]


async def run(args):
    with wave.open(args.wav, "rb") as f:
        assert f.getsampwidth() == 2, "the WAV must be 16-bit"
        rate, channels = f.getframerate(), f.getnchannels()
        pcm = f.readframes(f.getnframes())
    if channels != 1:
        # Keep the first channel of interleaved 16-bit frames.
        pcm = b"".join(pcm[i : i + 2] for i in range(0, len(pcm), 2 * channels))
    frame_bytes = rate // 10 * 2
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with websockets.connect(args.url, additional_headers=headers, max_size=None) as ws:
        ready = json.loads(await ws.recv())
        assert ready["type"] == "ready", ready
        await ws.send(json.dumps({"type": "config", "encoding": "i16_le", "sample_rate": rate}))
        ack = json.loads(await ws.recv())
        # A model picked in the query string (`?model=…`) is echoed; none is left out.
        picked = urllib.parse.parse_qs(urllib.parse.urlparse(args.url).query).get("model")
        assert ack.pop("model", None) == (picked[0] if picked else None), ack
        assert ack == {"type": "config", "encoding": "i16_le", "sample_rate": rate,
                       "language": None}, ack

        async def sender():
            for i in range(0, len(pcm), frame_bytes):
                await ws.send(pcm[i : i + frame_bytes])
                await asyncio.sleep(0.1 / args.speed)
            await ws.send(json.dumps({"type": "end"}))

        messages = []

        async def receiver():
            while True:
                msg = json.loads(await ws.recv())
                messages.append(msg)
                if args.verbose:
                    print(json.dumps(msg), flush=True)
                if msg["type"] == "error":
                    raise AssertionError(f"server error: {msg}")
                if msg["type"] == "done":
                    return

        await asyncio.gather(sender(), receiver())

    lags = [m for m in messages[:-1] if m["type"] == "lag"]
    for m in lags:
        assert set(m) == {"type", "seconds", "max_lag_seconds"}, m
        assert 0.0 <= m["seconds"] and m["max_lag_seconds"] > 0.0, m
    events = [m for m in messages[:-1] if m["type"] != "lag"]
    kinds = [m["type"] for m in events]
    print(f"{len(events)} events: {kinds.count('partial')} partial, {kinds.count('final')} final"
          f" ({len(lags)} lag notices)")
    for ev in events:
        assert ev["type"] in ("partial", "final"), ev
        check_event(ev)
    assert kinds.count("partial") >= 1, "no partial result before the end of the stream"
    finals = [e["text"] for e in events if e["type"] == "final"]
    assert finals, "no final event"
    text = " ".join(t.strip() for t in finals)
    got, want = words_of(text), words_of(args.expect)
    edits = word_edits(got, want)
    print(f"streamed: {text!r}")
    print(f"offline:  {args.expect!r}")
    print(f"word edits: {edits} of {len(want)} words (allowed {args.max_word_errors})")
    assert edits <= args.max_word_errors, "streamed text is too far from the offline transcript"


async def finals_of(url, pcm, rate, api_key, extra=None):
    """Streams `pcm` in 100 ms frames as fast as the socket takes them (with `extra` fields in
    the config message); returns the finals joined."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(json.dumps({"type": "config", "encoding": "i16_le", "sample_rate": rate, **(extra or {})}))
        ack = json.loads(await ws.recv())
        assert ack["type"] == "config", ack
        for k, v in (extra or {}).items():
            assert ack.get(k) == v, f"config ack {ack} lacks {k}={v!r}"
        step = rate // 10 * 2
        for i in range(0, len(pcm), step):
            await ws.send(pcm[i : i + step])
        await ws.send(json.dumps({"type": "end"}))
        finals = []
        while True:
            msg = json.loads(await ws.recv())
            if msg["type"] == "error":
                raise AssertionError(f"server error: {msg}")
            if msg["type"] == "final":
                finals.append(msg["text"].strip())
            if msg["type"] == "done":
                return " ".join(finals)


async def options_check(args):
    with wave.open(args.wav, "rb") as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1, "a mono 16-bit WAV"
        rate, pcm = w.getframerate(), w.readframes(w.getnframes())
    options = [o.split("=", 1) for o in args.options_check]
    sep = "&" if "?" in args.url else "?"
    plain = await finals_of(args.url, pcm, rate, args.api_key)
    texts = {"plain": plain}
    for name, value in options:
        query = f"{args.url}{sep}{urllib.parse.urlencode({name: value})}"
        by_query = await finals_of(query, pcm, rate, args.api_key)
        by_config = await finals_of(args.url, pcm, rate, args.api_key, {name: value})
        print(f"{name}: query {by_query!r}, config {by_config!r}")
        assert by_query == by_config, f"{name} in the query and in config differ"
        assert by_query != plain, f"{name} changed nothing: {plain!r}"
        texts[name] = by_query
    again = await finals_of(args.url, pcm, rate, args.api_key)
    assert again == plain, f"a plain stream after the others: {again!r} != {plain!r}"
    print(f"plain: {plain!r}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="ws://host:port/v1/stream")
    p.add_argument("--wav", required=True, help="a 16-bit WAV file")
    p.add_argument("--expect", help="the offline transcript of the same file")
    p.add_argument("--options-check", nargs="+", metavar="NAME=VALUE",
                   help="check per-stream decoding options instead (see above)")
    p.add_argument("--max-word-errors", type=int, default=3)
    p.add_argument("--speed", type=float, default=10.0, help="times real time")
    p.add_argument("--api-key")
    p.add_argument("--verbose", action="store_true", help="print every message received")
    args = p.parse_args()
    if not args.options_check and args.expect is None:
        p.error("--expect is required (or --options-check)")
    try:
        asyncio.run(options_check(args) if args.options_check else run(args))
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
