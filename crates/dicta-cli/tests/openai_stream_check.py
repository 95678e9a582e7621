#!/usr/bin/env python3
"""`stream=true` on `/v1/audio/transcriptions` with the official `openai` SDK against a real
`dicta serve` (tests/serve_e2e.rs): the events are `transcript.text.delta`s then one
`transcript.text.done`; the deltas put together are the done text, which is the plain (json)
request's text; the first delta comes while the backend is still decoding the recording's
later windows (the server's `dicta_backend_seconds_count` has not moved yet when it arrives, and
moves by one by the end); errors before any text are ordinary 400s. Exits non-zero on the first
failed check.
"""

import argparse
import re
import sys
import urllib.request

import openai
from openai import OpenAI


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what.splitlines()[0][:150]}")


def backend_calls(base):
    text = urllib.request.urlopen(f"{base}/metrics").read().decode()
    m = re.search(r"^dicta_backend_seconds_count (\d+)", text, re.M)
    return int(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="http://host:port")
    ap.add_argument("--audio", required=True, help="a recording of more than one 30 s window")
    a = ap.parse_args()
    client = OpenAI(base_url=f"{a.base}/v1", api_key="unused")
    with open(a.audio, "rb") as f:
        plain = client.audio.transcriptions.create(model="whisper-1", file=f).text

    before = backend_calls(a.base)
    deltas, done, at_first = [], None, None
    with open(a.audio, "rb") as f:
        for ev in client.audio.transcriptions.create(model="whisper-1", file=f, stream=True):
            if ev.type == "transcript.text.delta":
                check(done is None, "no delta after done")
                if at_first is None:
                    at_first = backend_calls(a.base)
                deltas.append(ev.delta)
            else:
                check(ev.type == "transcript.text.done" and done is None, f"one done event ({ev.type})")
                done = ev.text
    check(done is not None and len(deltas) >= 2, f"{len(deltas)} deltas, then done")
    check("".join(deltas) == done, f"the deltas make the done text\n{''.join(deltas)!r}\n{done!r}")
    check(done == plain, f"streamed text == plain request's text\n{done!r}\n{plain!r}")
    check(at_first == before, f"first delta before the backend answered (backend calls {before} -> {at_first})")
    check(backend_calls(a.base) == before + 1, "one backend call for the request")

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
    print("all stream checks passed")


if __name__ == "__main__":
    main()
