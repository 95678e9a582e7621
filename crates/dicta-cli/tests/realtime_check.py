#!/usr/bin/env python3
"""OpenAI's Realtime transcription API with the official `openai` SDK (`client.realtime.connect(
extra_query={"intent": "transcription"})`, which needs `websockets`) against a real `dicta serve`
with a voice activity detector (tests/serve_vad.rs):

- `session.created` is a transcription session with `server_vad` turn detection; `session.update`
  answers `session.updated` with the new settings (`near_field` noise reduction among them: the
  turns below are found on cleaned audio), and refuses `semantic_vad` with an error event;
- two utterances with pauses, appended as 24 kHz PCM faster than real time, become two items:
  `speech_started` (at the speech, less the prefix padding) → `speech_stopped` → `committed`
  (the second naming the first as its previous item) → deltas that make the `completed`
  transcript, which is the CLI's text of that utterance; with logprobs included, its tokens;
- without turn detection `input_audio_buffer.commit` commits the buffer by hand, an empty
  commit and bad base64 are error events, and the session goes on;
- with `--no-detector` (a server started with `--no-vad`): no turn detection by default, and
  asking for `server_vad` is an error event;
- the beta dialect (`client.beta.realtime`): `transcription_session.created`, a flat
  `transcription_session.update` answered by `transcription_session.updated`, an unknown format
  refused, and a commit transcribed with logprobs;
- with `--api-key`: the SDK's `Authorization` header opens a session, and so does a browser's
  handshake (`websockets` offering OpenAI's subprotocols `realtime` and
  `openai-insecure-api-key.<key>`, answered with `realtime`); a wrong key or none is a 401.

Exits non-zero on the first failed check.
"""

import argparse
import base64
import signal
import sys
import wave

from array import array

from openai import OpenAI
from checks import check, words




def read24(path):
    """A 16 kHz mono 16-bit WAV as 24 kHz 16-bit samples (linear interpolation)."""
    with wave.open(path, "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        x = array("h", w.readframes(w.getnframes()))
    if sys.byteorder == "big":
        x.byteswap()
    out = array("h")
    for k in range(len(x) * 3 // 2):
        t = k / 1.5
        i = int(t)
        j = min(i + 1, len(x) - 1)
        out.append(round(x[i] + (x[j] - x[i]) * (t - i)))
    return out


def silence(seconds, rate=24000):
    return array("h", bytes(2 * int(seconds * rate)))


def pcm16(x):
    if sys.byteorder == "big":
        x = array("h", x)
        x.byteswap()
    return x.tobytes()


def append_all(conn, audio, chunk=2400):
    for i in range(0, len(audio), chunk):
        conn.input_audio_buffer.append(audio=base64.b64encode(pcm16(audio[i:i + chunk])).decode())


def events_until(conn, done, what):
    """Events until `done(events)` holds."""
    out = []
    while not done(out):
        out.append(conn.recv())
    print(f"   ({what}: {[e.type for e in out]})")
    return out


def browser_handshake(base, key):
    """A browser's `new WebSocket(url, ["realtime", "openai-insecure-api-key." + key])`."""
    import json

    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    url = base.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    with connect(url, subprotocols=["realtime", f"openai-insecure-api-key.{key}"]) as ws:
        created = json.loads(ws.recv(timeout=30))
        check(created["type"] == "session.created" and ws.subprotocol == "realtime",
              f"the key as OpenAI's browser subprotocol: {created['type']}, protocol {ws.subprotocol}")
    for what, protocols in [("a wrong key", ["realtime", f"openai-insecure-api-key.{key}x"]),
                            ("no key", ["realtime"])]:
        try:
            with connect(url, subprotocols=protocols):
                status = 101
        except InvalidStatus as e:
            status = e.response.status_code
        check(status == 401, f"{what}: 401 ({status})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="http://host:port of a server with --vad-model")
    ap.add_argument("--audio", nargs=2, help="two 16 kHz mono WAV utterances")
    ap.add_argument("--expect", nargs=2, help="the CLI's text of each")
    ap.add_argument("--no-detector", action="store_true", help="the server has no VAD")
    ap.add_argument("--api-key", help="the server's API key")
    a = ap.parse_args()
    signal.alarm(300)  # a server that stops answering fails the check instead of hanging it
    client = OpenAI(base_url=f"{a.base}/v1", api_key=a.api_key or "unused")
    if a.api_key:
        browser_handshake(a.base, a.api_key)
    if a.no_detector:
        with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
            created = conn.recv()
            check(created.type == "session.created" and created.session.audio.input.turn_detection is None,
                  "without a detector: no turn detection")
            conn.session.update(session={"type": "transcription", "audio": {"input": {
                "turn_detection": {"type": "server_vad"}}}})
            e = conn.recv()
            check(e.type == "error" and "voice activity detector" in e.error.message,
                  f"server_vad without a detector: an error event ({e.type})")
        print("all realtime checks passed")
        return
    with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        created = conn.recv()
        check(created.type == "session.created" and created.session.type == "transcription",
              f"session.created: a transcription session ({created.type})")
        td = created.session.audio.input.turn_detection
        check(td is not None and td.type == "server_vad", f"server_vad turn detection by default: {td}")

        conn.session.update(session={"type": "semantic_vad_please", "audio": {}})
        e = conn.recv()
        check(e.type == "error" and "transcription" in e.error.message, f"a wrong session type: error ({e.type})")
        conn.session.update(session={"type": "transcription", "audio": {"input": {
            "turn_detection": {"type": "semantic_vad"}}}})
        e = conn.recv()
        check(e.type == "error" and "semantic_vad" in e.error.message, "semantic_vad: an error event")
        conn.session.update(session={"type": "transcription", "audio": {"input": {
            "noise_reduction": {"type": "studio"}}}})
        e = conn.recv()
        check(e.type == "error" and "near_field" in e.error.message, "an unknown noise_reduction: an error event")
        conn.session.update(session={
            "type": "transcription",
            "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "transcription": {"model": "gpt-4o-transcribe", "language": "en"},
                # Longer than the pauses inside an utterance, shorter than the gaps between.
                "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                                   "silence_duration_ms": 1200},
                # OpenAI's documented example asks for it: the detector hears cleaned audio.
                "noise_reduction": {"type": "near_field"},
            }},
            "include": ["item.input_audio_transcription.logprobs"],
        })
        e = conn.recv()
        check(e.type == "session.updated" and e.session.audio.input.transcription.language == "en"
              and e.session.audio.input.turn_detection.silence_duration_ms == 1200
              and e.session.audio.input.noise_reduction.type == "near_field",
              f"session.updated carries the new settings ({e.type})")

        # Two utterances with pauses: two items, each heard, committed and transcribed.
        rate = 24000
        clips = [read24(p) for p in a.audio]
        audio = silence(0.5) + clips[0] + silence(2.5) + clips[1] + silence(2.5)
        append_all(conn, audio)
        evs = events_until(conn, lambda es: sum(x.type.endswith(".completed") for x in es) == 2, "two items")
        items = []
        for ev in evs:
            if ev.type == "input_audio_buffer.speech_started":
                items.append({"id": ev.item_id, "start": ev.audio_start_ms, "deltas": []})
        check(len(items) == 2, f"two speech_started ({len(items)})")
        by_id = {it["id"]: it for it in items}
        order = []
        for ev in evs:
            it = by_id.get(getattr(ev, "item_id", None))
            if it is None:
                continue
            order.append((it["id"], ev.type))
            if ev.type == "input_audio_buffer.speech_stopped":
                it["end"] = ev.audio_end_ms
            elif ev.type == "input_audio_buffer.committed":
                it["previous"] = ev.previous_item_id
            elif ev.type.endswith(".delta"):
                it["deltas"].append(ev.delta)
            elif ev.type.endswith(".completed"):
                it["transcript"] = ev.transcript
                it["logprobs"] = ev.logprobs
                it["usage"] = ev.usage
        for it in items:
            kinds = [k for i, k in order if i == it["id"]]
            want = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                    "input_audio_buffer.committed"]
            check(kinds[:3] == want and kinds[-1].endswith(".completed"),
                  f"{it['id']}: started, stopped, committed, then its transcription ({kinds})")
        starts = [0.5, 0.5 + len(clips[0]) / rate + 2.5]
        for k, (it, expect) in enumerate(zip(items, a.expect)):
            check(abs(it["start"] / 1000 - (starts[k] - 0.3)) < 0.4,
                  f"item {k + 1} starts at {it['start']} ms (speech at {starts[k]:.2f} s, less 300 ms)")
            check(it["end"] > it["start"], "and stops after it starts")
            check("".join(it["deltas"]) == it["transcript"], f"its deltas make its transcript\n{it['deltas']!r}")
            check(words(it["transcript"]) == words(expect),
                  f"item {k + 1}: the CLI's text\n{it['transcript']!r}\n{expect!r}")
            lps = it["logprobs"] or []
            spelled = b"".join(bytes(int(b) for b in x.bytes) for x in lps).decode()
            check(lps and spelled.strip() == it["transcript"] and all(x.logprob <= 0 for x in lps),
                  f"item {k + 1}: logprobs spell its transcript ({len(lps)} tokens)")
            check(it["usage"].type == "duration" and it["usage"].seconds > 1, f"usage: {it['usage']}")
        check(items[0]["previous"] is None and items[1]["previous"] == items[0]["id"],
              "committed items chain by previous_item_id")

        # By hand: no turn detection, a commit, an empty commit, bad base64.
        conn.session.update(session={"type": "transcription", "audio": {"input": {
            "turn_detection": None, "noise_reduction": None}}})
        e = conn.recv()
        check(e.type == "session.updated" and e.session.audio.input.turn_detection is None
              and e.session.audio.input.noise_reduction is None,
              "turn detection and noise reduction off")
        append_all(conn, clips[0])
        conn.input_audio_buffer.commit()
        evs = events_until(conn, lambda es: any(x.type.endswith(".completed") for x in es), "a commit by hand")
        check(evs[0].type == "input_audio_buffer.committed" and evs[0].previous_item_id == items[1]["id"],
              "committed by hand, after the last item")
        check(words(evs[-1].transcript) == words(a.expect[0]), f"the CLI's text\n{evs[-1].transcript!r}")
        conn.input_audio_buffer.commit()
        e = conn.recv()
        check(e.type == "error" and "100 ms" in e.error.message, f"an empty commit: error ({e.type})")
        conn.input_audio_buffer.append(audio="not base64!")
        e = conn.recv()
        check(e.type == "error" and "base64" in e.error.message, "bad base64: error")
        conn.input_audio_buffer.append(audio=base64.b64encode(pcm16(clips[1][:24000])).decode())
        conn.input_audio_buffer.clear()
        e = conn.recv()
        check(e.type == "input_audio_buffer.cleared", f"clear: cleared ({e.type})")

    # The beta dialect (`client.beta.realtime`, which sends `OpenAI-Beta: realtime=v1` and a model
    # in the query): `transcription_session.created` first, the session's fields flat.
    # The beta's client takes the WebSocket address as given (it would speak TLS to http://).
    beta = OpenAI(base_url=f"{a.base}/v1", websocket_base_url=f"ws{a.base.removeprefix('http')}/v1",
                  api_key=a.api_key or "unused")
    with beta.beta.realtime.connect(model="whisper-1", extra_query={"intent": "transcription"}) as conn:
        created = conn.recv()
        check(created.type == "transcription_session.created", f"beta: transcription_session.created ({created.type})")
        # The SDK has no type for this event (OpenAI sent it all the same): its session is a dict.
        s = created.session
        check(s["input_audio_format"] == "pcm16" and s["turn_detection"]["type"] == "server_vad",
              f"beta: pcm16 and server_vad by default ({s})")
        conn.send({"type": "transcription_session.update", "session": {
            "input_audio_format": "pcm16",
            "input_audio_transcription": {"model": "whisper-1", "language": "en"},
            "turn_detection": None,
            "input_audio_noise_reduction": {"type": "far_field"},
            "include": ["item.input_audio_transcription.logprobs"],
        }})
        e = conn.recv()
        check(e.type == "transcription_session.updated" and e.session.turn_detection is None
              and e.session.input_audio_transcription.language == "en"
              # Not a field of the SDK's beta session type: kept as the dict it came as.
              and e.session.input_audio_noise_reduction == {"type": "far_field"},
              f"beta: transcription_session.updated carries the new settings ({e})")
        conn.send({"type": "transcription_session.update", "session": {"input_audio_format": "mp3"}})
        e = conn.recv()
        check(e.type == "error" and "g711_ulaw" in e.error.message, f"beta: an unknown format: error ({e.type})")
        append_all(conn, clips[0])
        conn.input_audio_buffer.commit()
        evs = events_until(conn, lambda es: any(x.type.endswith(".completed") for x in es), "beta: a commit")
        check(evs[0].type == "input_audio_buffer.committed", f"beta: committed ({evs[0].type})")
        done = evs[-1]
        check(words(done.transcript) == words(a.expect[0]), f"beta: the CLI's text\n{done.transcript!r}")
        check(bool(done.logprobs), "beta: logprobs included")
    print("all realtime checks passed")


if __name__ == "__main__":
    main()
