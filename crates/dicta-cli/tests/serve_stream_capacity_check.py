#!/usr/bin/env python3
"""Opens live WebSocket streams on `dicta serve` one after another until the server refuses one,
as a call centre would, and checks that admission follows capacity and that streams which fall
behind are told so and ended cleanly.

Each stream sends a 16 kHz mono WAV (looped) as i16_le in 100 ms frames at real time, with the
`websockets` client's keepalive pings every 2 s (timeout 4 s). A new stream starts every
`--every` seconds until the upgrade is refused or `--max-open` are open; then the open streams
go on for `--hold` seconds and end their utterance. Checks:

- an upgrade is refused with HTTP 503, `Retry-After` and an `overloaded` JSON body saying the
  streams are behind, before `--max-open` streams are open (admission by capacity);
- at least one `lag` event arrives (`seconds` > 0, `max_lag_seconds`);
- no stream is dropped for missed pings or closed with 1011: every stream ends either with its
  finals and `done` after its `end`, or, when shed for being too far behind, with an
  `overloaded` error, `done` and close 1013;
- the streams that ran to the end got non-empty finals;
- with `--grpc host:port`: right after the refusal, a Riva `StreamingRecognize` call (PyPI
  `nvidia-riva-client`) is refused too, with `RESOURCE_EXHAUSTED` saying the streams are behind.
  The lag hovers at the limit when it first crosses it, so a gRPC call that comes in as it dips
  is admitted: then both are probed again (up to 5 times, half a second apart, no new stream
  opened while the upgrade is still refused) until a refusal of both falls together.

Run by crates/dicta-cli/tests/serve_e2e.rs with a small `--stream-admit-lag-s`; usable by hand:
    python3 serve_stream_capacity_check.py --url ws://127.0.0.1:8000/v1/stream --wav clip.wav
Exit status 0 on success; prints what it saw either way.
"""

import argparse
import asyncio
import json
import sys
import time
import wave

import websockets


def load_pcm(path):
    with wave.open(path, "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return w.readframes(w.getnframes())


class Outcome:
    def __init__(self, n):
        self.n = n
        self.events = []
        self.close_code = None
        self.error = None


def is_shed(events):
    return any(e["type"] == "error" and e["error"]["type"] == "overloaded" for e in events)


async def run_stream(url, pcm, stop, outcome):
    frame = 3200  # 100 ms of i16_le at 16 kHz
    async with websockets.connect(url, ping_interval=2, ping_timeout=4, max_size=None) as ws:
        ready = json.loads(await ws.recv())
        assert ready["type"] == "ready", ready

        async def reader():
            async for msg in ws:
                ev = json.loads(msg)
                outcome.events.append(ev)
                if ev["type"] == "done":
                    return

        read = asyncio.create_task(reader())
        start = time.monotonic()
        i = 0
        try:
            while not stop.is_set() and not read.done():
                off = (i * frame) % (len(pcm) - frame)
                await ws.send(pcm[off : off + frame])
                i += 1
                await asyncio.sleep(max(0.0, start + i * 0.1 - time.monotonic()))
            if not read.done():
                await ws.send(json.dumps({"type": "end"}))
        except websockets.ConnectionClosed:
            pass
        # Every message up to `done` (a shed stream's come before its close frame).
        await asyncio.wait_for(read, 60)
        if is_shed(outcome.events):
            await asyncio.wait_for(ws.wait_closed(), 10)
    outcome.close_code = ws.close_code


def grpc_refusal(uri, pcm):
    """Code and details of a Riva streaming call made now (None, None when it is accepted)."""
    import grpc
    import riva.client

    asr = riva.client.ASRService(riva.client.Auth(uri=uri))
    config = riva.client.StreamingRecognitionConfig(
        config=riva.client.RecognitionConfig(
            encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=16000, language_code="en-US"),
        interim_results=False)
    try:
        for _ in asr.streaming_response_generator(audio_chunks=[pcm[:3200]], streaming_config=config):
            pass
    except grpc.RpcError as e:
        return e.code(), e.details()
    return None, None


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--wav", required=True)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--max-open", type=int, default=16)
    ap.add_argument("--hold", type=float, default=15.0)
    ap.add_argument("--grpc", help="host:port of the server's gRPC listener: check its admission too")
    args = ap.parse_args()
    pcm = load_pcm(args.wav)
    stop = asyncio.Event()
    outcomes, tasks, refused, grpc_seen, grpc_tries = [], [], None, None, 0
    while len(tasks) < args.max_open:
        try:
            # Probe admission with a bare upgrade: 503 is answered before the socket opens.
            probe = await websockets.connect(args.url, open_timeout=10)
        except websockets.InvalidStatus as e:
            refused = e.response
            if args.grpc:
                grpc_seen = await asyncio.get_running_loop().run_in_executor(None, grpc_refusal, args.grpc, pcm)
                if grpc_seen[0] is None and grpc_tries < 5:
                    grpc_tries += 1
                    print(f"gRPC admitted as the lag dipped (try {grpc_tries}); probing both again")
                    await asyncio.sleep(0.5)
                    continue
            break
        await probe.close()
        outcome = Outcome(len(tasks))
        outcomes.append(outcome)
        tasks.append(asyncio.create_task(run_stream(args.url, pcm, stop, outcome)))
        await asyncio.sleep(args.every)
    print(f"streams admitted: {len(tasks)}; refused: {refused is not None}")
    await asyncio.sleep(args.hold)
    stop.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)

    ok = True

    def fail(msg):
        nonlocal ok
        ok = False
        print("FAIL:", msg)

    if refused is None:
        fail(f"all {args.max_open} streams were admitted")
    else:
        body = json.loads(refused.body)
        print("refusal:", refused.status_code, dict(refused.headers).get("retry-after"), body)
        if refused.status_code != 503 or refused.headers.get("retry-after") is None:
            fail("the refusal is not a 503 with Retry-After")
        if body["error"]["type"] != "overloaded" or "behind" not in body["error"]["message"]:
            fail(f"the refusal does not say the streams are behind: {body}")
    if args.grpc and refused is not None:
        print("gRPC while behind:", grpc_seen)
        code, details = grpc_seen
        if code is None or code.name != "RESOURCE_EXHAUSTED" or "behind" not in (details or ""):
            fail(f"a gRPC stream was not refused while the streams were behind: {grpc_seen}")
    lags = [e for o in outcomes for e in o.events if e["type"] == "lag"]
    print(f"lag events: {len(lags)}; first: {lags[:1]}")
    if not lags or not all(e["seconds"] > 0 and "max_lag_seconds" in e for e in lags):
        fail("no well-formed lag event")
    for o, r in zip(outcomes, results):
        kinds = [e["type"] for e in o.events]
        finals = [e["text"] for e in o.events if e["type"] == "final"]
        print(f"stream {o.n}: close {o.close_code}, shed {is_shed(o.events)}, events {len(kinds)}, "
              f"finals {len(finals)}, text {' '.join(finals)[:60]!r}")
        if isinstance(r, Exception):
            fail(f"stream {o.n} raised {r!r}")
            continue
        if "done" not in kinds:
            fail(f"stream {o.n} never got done: {kinds[-5:]}")
        if is_shed(o.events):
            if o.close_code != 1013:
                fail(f"stream {o.n} was shed but closed with {o.close_code}")
        elif o.close_code not in (None, 1000):
            fail(f"stream {o.n} closed with {o.close_code}")
        elif not "".join(finals).strip():
            fail(f"stream {o.n} ran to its end without any final text")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
