#!/usr/bin/env python3
"""Opens live Riva `StreamingRecognize` calls (PyPI `nvidia-riva-client`) on `dicta serve` one
after another, with no WebSocket stream open, until the server refuses one: gRPC calls alone must
count in the capacity rules, as WebSocket streams do.

Each call sends a 16 kHz mono WAV (looped) as LINEAR_PCM in 100 ms chunks at real time from its
own thread. A new call starts every `--every` seconds until one is refused or `--max-open` are
open; then the open calls go on for `--hold` seconds and half-close. Checks:

- a new call is refused with `RESOURCE_EXHAUSTED` saying the streams are behind, before
  `--max-open` calls are open (the lag of gRPC calls feeds admission);
- every call started ends either with OK after its half-close (with final text), or, shed for
  being more than `--stream-max-lag-s` behind, with `RESOURCE_EXHAUSTED` saying so (after the
  finals of what was transcribed), or is itself refused at its start with `RESOURCE_EXHAUSTED`
  saying the streams are behind (the lag can pass the limit between the probe and the call);
  never another status.

Run by crates/dicta-cli/tests/serve_grpc.rs with small lag limits; usable by hand:
    python3 serve_grpc_capacity_check.py --uri 127.0.0.1:50051 --wav clip.wav
Exit status 0 on success; prints what it saw either way.
"""

import argparse
import sys
import threading
import time
import wave

import grpc
import riva.client


def load_pcm(path):
    with wave.open(path, "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return w.readframes(w.getnframes())


def config():
    return riva.client.StreamingRecognitionConfig(
        config=riva.client.RecognitionConfig(
            encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=16000, language_code="en-US"),
        interim_results=False)


class Call:
    def __init__(self, n):
        self.n = n
        self.finals = []
        self.code = None
        self.details = None


def real_time_chunks(pcm, stop):
    frame = 3200  # 100 ms
    start = time.monotonic()
    i = 0
    while not stop.is_set():
        off = (i * frame) % (len(pcm) - frame)
        yield pcm[off:off + frame]
        i += 1
        time.sleep(max(0.0, start + i * 0.1 - time.monotonic()))


def run_call(asr, pcm, stop, call):
    try:
        for resp in asr.streaming_response_generator(audio_chunks=real_time_chunks(pcm, stop),
                                                     streaming_config=config()):
            call.finals.extend(r.alternatives[0].transcript for r in resp.results if r.is_final)
        call.code = grpc.StatusCode.OK
    except grpc.RpcError as e:
        call.code, call.details = e.code(), e.details()


def refused_now(asr, pcm):
    """(code, details) of a short call made now; (None, None) when it is accepted."""
    try:
        for _ in asr.streaming_response_generator(audio_chunks=iter([pcm[:3200]]), streaming_config=config()):
            pass
    except grpc.RpcError as e:
        return e.code(), e.details()
    return None, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uri", required=True)
    ap.add_argument("--wav", required=True)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--max-open", type=int, default=12)
    ap.add_argument("--hold", type=float, default=15.0)
    args = ap.parse_args()
    pcm = load_pcm(args.wav)
    asr = riva.client.ASRService(riva.client.Auth(uri=args.uri))
    stop = threading.Event()
    calls, threads, refusal = [], [], None
    while len(calls) < args.max_open:
        code, details = refused_now(asr, pcm)
        if code is not None:
            refusal = (code, details)
            break
        call = Call(len(calls))
        calls.append(call)
        t = threading.Thread(target=run_call, args=(asr, pcm, stop, call))
        t.start()
        threads.append(t)
        time.sleep(args.every)
    print(f"calls admitted: {len(calls)}; refusal: {refusal}")
    time.sleep(args.hold)
    stop.set()
    for t in threads:
        t.join(120)

    ok = True

    def fail(msg):
        nonlocal ok
        ok = False
        print("FAIL:", msg)

    if refusal is None:
        fail(f"all {args.max_open} calls were admitted")
    elif refusal[0] != grpc.StatusCode.RESOURCE_EXHAUSTED or "behind" not in (refusal[1] or ""):
        fail(f"the refusal is not RESOURCE_EXHAUSTED saying the streams are behind: {refusal}")
    for c in calls:
        text = " ".join(c.finals)
        print(f"call {c.n}: {c.code}, finals {len(c.finals)}, details {c.details!r}, text {text[:60]!r}")
        if c.code == grpc.StatusCode.OK:
            if not text.strip():
                fail(f"call {c.n} ended OK without any final text")
        elif c.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            shed = "behind this stream" in (c.details or "")
            refused = "open streams are" in (c.details or "") and not c.finals
            if not (shed or refused):
                fail(f"call {c.n} was ended without saying it was behind: {c.details!r}")
        else:
            fail(f"call {c.n} ended with {c.code}: {c.details!r}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
