#!/usr/bin/env python3
"""`stream=true` on `/v1/audio/transcriptions` with the official `openai` SDK against a real
`dicta serve` (tests/serve_e2e.rs): the events are `transcript.text.delta`s then one
`transcript.text.done`; the deltas put together are the done text, which is the plain (json)
request's text; the first delta comes while the backend is still decoding the recording's
later windows (the server's `dicta_backend_seconds_count` has not moved yet when it arrives, and
moves by one by the end); the request's `dicta_http_requests_total` and duration are recorded
when the last event has gone out, not with the headers, and a client that leaves mid-stream is
counted in `dicta_client_disconnects_total`; errors before any text are ordinary 400s. With
`include=["logprobs"]` the answer (plain or streamed: each delta and `done`) carries its tokens'
log-probabilities, whose bytes spell the text. Exits non-zero on the first failed check.
"""

import argparse
import io
import re
import time
import urllib.request
import wave

import openai
from openai import OpenAI
from checks import check



def metric(base, pattern):
    text = urllib.request.urlopen(f"{base}/metrics").read().decode()
    m = re.search(pattern, text, re.M)
    return float(m.group(1)) if m else 0


def backend_calls(base):
    return metric(base, r"^dicta_backend_seconds_count (\S+)")


def route_done(base):
    """Answered requests of the transcription route (status 200) so far."""
    return metric(base, r'^dicta_http_requests_total\{route="/v1/audio/transcriptions",status="200"\} (\S+)')


def disconnects(base):
    return metric(base, r"^dicta_client_disconnects_total (\S+)")


def eventually(what, fn, want, seconds=5.0):
    """`fn()` == `want` within `seconds` (the server records a stream's end just after its last
    event leaves, so a client can read the metrics a moment before)."""
    end = time.monotonic() + seconds
    while True:
        got = fn()
        if got == want or time.monotonic() > end:
            check(got == want, f"{what} ({got} == {want})")
            return
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="http://host:port")
    ap.add_argument("--audio", required=True, help="a recording of more than one 30 s window")
    ap.add_argument("--timeout-base", default=None,
                    help="a server with --request-timeout-s 1: a long stream must end with a timeout")
    a = ap.parse_args()
    client = OpenAI(base_url=f"{a.base}/v1", api_key="unused")
    with open(a.audio, "rb") as f:
        plain = client.audio.transcriptions.create(model="whisper-1", file=f).text

    before = backend_calls(a.base)
    answered = route_done(a.base)
    deltas, done, at_first, answered_at_first = [], None, None, None
    with open(a.audio, "rb") as f:
        for ev in client.audio.transcriptions.create(model="whisper-1", file=f, stream=True):
            if ev.type == "transcript.text.delta":
                check(done is None, "no delta after done")
                if at_first is None:
                    at_first = backend_calls(a.base)
                    answered_at_first = route_done(a.base)
                deltas.append(ev.delta)
            else:
                check(ev.type == "transcript.text.done" and done is None, f"one done event ({ev.type})")
                done = ev.text
    check(done is not None and len(deltas) >= 2, f"{len(deltas)} deltas, then done")
    check("".join(deltas) == done, f"the deltas make the done text\n{''.join(deltas)!r}\n{done!r}")
    check(done == plain, f"streamed text == plain request's text\n{done!r}\n{plain!r}")
    check(at_first == before, f"first delta before the backend answered (backend calls {before} -> {at_first})")
    check(backend_calls(a.base) == before + 1, "one backend call for the request")
    check(answered_at_first == answered, "the request is not counted as answered at its first event")
    eventually("the request is counted once its last event is out", lambda: route_done(a.base), answered + 1)

    # A client that leaves after the first delta: counted as a disconnect, not as answered.
    gone = disconnects(a.base)
    with open(a.audio, "rb") as f:
        stream = client.audio.transcriptions.create(model="whisper-1", file=f, stream=True)
        first = next(iter(stream))
        check(first.type == "transcript.text.delta", "a first delta before leaving")
        stream.close()
    eventually("a client leaving mid-stream is a disconnect", lambda: disconnects(a.base), gone + 1)
    check(route_done(a.base) == answered + 1, "and not an answered request")

    logprobs_check(client, a.audio, plain)

    try:
        client.audio.transcriptions.create(model="whisper-1", file=("bad.wav", b"RIFF\x10\x00\x00\x00WAVEjunk"), stream=True)
        check(False, "an undecodable upload with stream=True raises BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "bad.wav" in str(e), "an undecodable upload with stream=True: 400 naming it")
    try:
        with open(a.audio, "rb") as f:
            client.audio.translations.create(model="whisper-1", file=f, extra_body={"stream": True})
        check(False, "translations with stream raise BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "stream" in str(e), "translations refuse stream=true with a 400")
    if a.timeout_base:
        timeout_check(a)
    print("all stream checks passed")


def spelled(logprobs):
    # The SDK types `bytes` as numbers (floats).
    return b"".join(bytes(int(b) for b in lp.bytes) for lp in logprobs).decode("utf-8")


def logprobs_check(client, audio, plain):
    """include=["logprobs"]: OpenAI's token entries, plain and streamed; json only."""
    with open(audio, "rb") as f:
        t = client.audio.transcriptions.create(model="whisper-1", file=f, include=["logprobs"])
    check(t.text == plain, "include=logprobs leaves the text as it is")
    lps = t.logprobs or []
    check(len(lps) > 20 and all(lp.logprob <= 0 and lp.token for lp in lps),
          f"{len(lps)} tokens, each with a log-probability <= 0")
    check(spelled(lps).strip() == t.text, f"their bytes spell the text\n{spelled(lps)!r}")
    deltas, done = [], None
    with open(audio, "rb") as f:
        for ev in client.audio.transcriptions.create(model="whisper-1", file=f, stream=True, include=["logprobs"]):
            if ev.type == "transcript.text.delta":
                check(ev.logprobs and spelled(ev.logprobs).strip() == ev.delta.strip(),
                      f"a delta's logprobs spell it: {ev.delta[:40]!r}")
                deltas.append(ev)
            else:
                done = ev
    check(done is not None and [(x.token, x.logprob) for x in done.logprobs] == [(x.token, x.logprob) for x in lps],
          "done carries every token's, as the plain answer")
    check([x.token for d in deltas for x in d.logprobs] == [x.token for x in lps], "the deltas' together too")
    try:
        with open(audio, "rb") as f:
            client.audio.transcriptions.create(model="whisper-1", file=f, include=["logprobs"], response_format="text")
        check(False, "include=logprobs with response_format=text raises BadRequestError")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "logprobs" in str(e), "include=logprobs needs json: 400")


def timeout_check(a):
    """Six times --audio in one WAV (minutes of speech) against a 1 s request_timeout_s: either the
    timeout comes before any text (the usual 504) or the stream ends with a `timeout` error event,
    never with done; the server then still answers."""
    with wave.open(a.audio, "rb") as w:
        params, frames = w.getparams(), w.readframes(w.getnframes())
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setparams(params)
        w.writeframes(frames * 6)
    client = OpenAI(base_url=f"{a.timeout_base}/v1", api_key="unused", max_retries=0)
    types = []
    try:
        for ev in client.audio.transcriptions.create(model="whisper-1", file=("long.wav", buf.getvalue()), stream=True):
            types.append(ev.type)
        check(False, f"a stream past request_timeout_s ends with an error, got {types[-3:]}")
    except openai.APIStatusError as e:
        check(e.status_code == 504 and not types, f"timeout before any text: 504 ({e.status_code})")
    except openai.APIError as e:
        check(types and "transcript.text.done" not in types and "request_timeout_s" in str(e),
              f"timeout after {len(types)} deltas: an error event ({str(e)[:80]})")
    # (Health, not a transcription: under a 1 s limit that could time out on a busy machine.)
    health = urllib.request.urlopen(f"{a.timeout_base}/health")
    check(health.status == 200, "the server still answers after the timeout")


if __name__ == "__main__":
    main()
