#!/usr/bin/env python3
"""What a Realtime session's `noise_reduction` does to transcripts: the dev set's short clips
(the bench's `short` manifest), clean and with noise mixed in, each sent through a real
`dicta serve` as one OpenAI Realtime transcription session (the `openai` SDK; no turn
detection, the clip committed by hand, so only the audio differs), with `noise_reduction` null
and `near_field`. Prints the corpus WER (whisper-normalizer's English normaliser, jiwer) of
each condition.

    target/release/dicta bench engine -w short --runs 0   # once, writes the short manifest
    target/release/dicta serve --model tiny.en --port 8000 &
    python3 tools/realtime_noise/measure.py --base http://127.0.0.1:8000 \\
        [--manifest ~/.cache/dicta/bench/short-s0/manifest.jsonl] [--snr 5] [--limit 0]

Noise (fixed seeds, so every run hears the same): `white` (Gaussian), `babble` (four other
clips of the set summed, looped), each scaled to `--snr` dB under the clip's RMS.
"""
import argparse
import base64
import json
import os

import jiwer
import numpy as np
import soundfile as sf
import soxr
from openai import OpenAI
from whisper_normalizer.english import EnglishTextNormalizer


def pcm24(x):
    y = soxr.resample(x, 16000, 24000)
    return (np.clip(np.round(y * 32768), -32768, 32767).astype("<i2")).tobytes()


def noise(kind, n, rng, pool):
    if kind == "white":
        return rng.standard_normal(n).astype(np.float32)
    picks = rng.choice(len(pool), size=4, replace=False)
    out = np.zeros(n, dtype=np.float32)
    for k in picks:
        p = pool[k]
        out += np.resize(p, n)
    return out


def transcribe(client, audio16, reduce):
    # A session per clip, as a call would be: nothing of one clip reaches the next.
    with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        assert conn.recv().type == "session.created"
        return transcribe_in(conn, audio16, reduce)


def transcribe_in(conn, audio16, reduce):
    conn.session.update(session={"type": "transcription", "audio": {"input": {
        "turn_detection": None,
        "noise_reduction": {"type": "near_field"} if reduce else None}}})
    ev = conn.recv()
    assert ev.type == "session.updated", ev
    data = pcm24(audio16)
    step = 24000 * 2 // 5  # 200 ms appends
    for i in range(0, len(data), step):
        conn.input_audio_buffer.append(audio=base64.b64encode(data[i:i + step]).decode())
    conn.input_audio_buffer.commit()
    while True:
        ev = conn.recv()
        if ev.type == "error":
            raise SystemExit(f"error event: {ev.error.message}")
        if ev.type.endswith("input_audio_transcription.completed"):
            return ev.transcript
        if ev.type.endswith("input_audio_transcription.failed"):
            return ""


def turns_session(client, audio16, reduce):
    """One session with server_vad over `audio16` (the noise runs through it): the items'
    transcripts in commit order."""
    with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        assert conn.recv().type == "session.created"
        conn.session.update(session={"type": "transcription", "audio": {"input": {
            "turn_detection": {"type": "server_vad"},
            "noise_reduction": {"type": "near_field"} if reduce else None}}})
        assert conn.recv().type == "session.updated"
        data = pcm24(audio16)
        step = 24000 * 2 // 5
        for i in range(0, len(data), step):
            conn.input_audio_buffer.append(audio=base64.b64encode(data[i:i + step]).decode())
        # A barrier: once answered, every append has been heard.
        conn.session.update(session={"type": "transcription"})
        committed, done, speaking, barrier = [], {}, False, False
        while not (barrier and not speaking and all(i in done for i in committed)):
            ev = conn.recv()
            if ev.type == "session.updated":
                barrier = True
                if speaking:
                    conn.input_audio_buffer.commit()
            elif ev.type == "input_audio_buffer.speech_started":
                speaking = True
            elif ev.type == "input_audio_buffer.committed":
                speaking = False
                committed.append(ev.item_id)
            elif ev.type.endswith("input_audio_transcription.completed"):
                done[ev.item_id] = ev.transcript
            elif ev.type.endswith("input_audio_transcription.failed"):
                done[ev.item_id] = ""
            elif ev.type == "error":
                raise SystemExit(f"error event: {ev.error.message}")
        return [done[i] for i in committed]


def turns(a, rows, clips, client, norm):
    """Sessions of three clips with 2.5 s gaps, white noise throughout at --snr dB under the
    speech: items found (3 expected) and WER, with and without noise reduction."""
    rng = np.random.default_rng(2)
    sessions = []
    for g in range(0, len(clips) - 2, 3):
        parts, refs = [np.zeros(16000, np.float32)], []
        for k in range(g, g + 3):
            parts += [clips[k], np.zeros(40000, np.float32)]
            refs.append(rows[k]["text"])
        x = np.concatenate(parts)
        speech = np.concatenate([clips[k] for k in range(g, g + 3)])
        e = rng.standard_normal(len(x)).astype(np.float32)
        gain = np.sqrt(np.mean(speech ** 2)) * 10 ** (-a.snr / 20)
        sessions.append(((x + gain * e).astype(np.float32), " ".join(refs)))
    for reduce in [False, True]:
        counts, hyps = [], []
        for x, _ in sessions:
            items = turns_session(client, x, reduce)
            counts.append(len(items))
            hyps.append(" ".join(items))
        wer = jiwer.wer([norm(r) for _, r in sessions], [norm(h) for h in hyps])
        right = sum(c == 3 for c in counts)
        print(f"turns, white {a.snr:g} dB, noise_reduction {'near_field' if reduce else 'null'}: "
              f"{right}/{len(sessions)} sessions with 3 items (items {sum(counts)} for "
              f"{3 * len(sessions)}), WER {100 * wer:.2f}%", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--manifest", default=os.path.expanduser("~/.cache/dicta/bench/short-s0/manifest.jsonl"))
    ap.add_argument("--snr", type=float, default=5.0)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--out", help="write per-clip transcripts here (JSON)")
    ap.add_argument("--turns", action="store_true",
                    help="measure turn detection instead: three clips a session, server_vad")
    a = ap.parse_args()
    rows = [json.loads(l) for l in open(a.manifest)]
    if a.limit:
        rows = rows[:a.limit]
    clips = []
    for r in rows:
        x, sr = sf.read(r["audio"], dtype="float32")
        if x.ndim > 1:
            x = x.mean(axis=1)
        assert sr == 16000, r["audio"]
        clips.append(x)
    norm = EnglishTextNormalizer()
    client = OpenAI(base_url=f"{a.base}/v1", api_key=os.environ.get("DICTA_API_KEY", "unused"))
    results = {}
    if a.turns:
        turns(a, rows, clips, client, norm)
        return
    # Noise drawn once per clip and kind, the same with and without reduction.
    rng = np.random.default_rng(1)
    noisy = {"clean": clips}
    for kind in ["white", "babble"]:
        mixed = []
        for k, x in enumerate(clips):
            pool = [c for j, c in enumerate(clips) if j != k]
            e = noise(kind, len(x), rng, pool)
            gain = np.sqrt(np.mean(x ** 2) / max(np.mean(e ** 2), 1e-12)) * 10 ** (-a.snr / 20)
            mixed.append((x + gain * e).astype(np.float32))
        noisy[kind] = mixed
    for kind, audio in noisy.items():
        for reduce in [False, True]:
            hyp = [transcribe(client, x, reduce) for x in audio]
            refs = [norm(r["text"]) for r in rows]
            hyps = [norm(h) for h in hyp]
            wer = jiwer.wer(refs, hyps)
            name = f"{kind}{'' if kind == 'clean' else f' {a.snr:g} dB'}, noise_reduction " + \
                ("near_field" if reduce else "null")
            results[name] = {"wer": wer, "texts": hyp}
            print(f"{name}: WER {100 * wer:.2f}% ({len(rows)} clips)", flush=True)
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
