#!/usr/bin/env python3
"""faster-whisper arm of `dicta bench` (PyPI faster-whisper, CTranslate2 on the CPU).

Speaks the driver's line protocol (crates/dicta-cli/src/bench/protocol.rs): prints one "ready"
JSON line once the model is loaded, then answers each JSON run request on stdin with one JSON
reply line on stdout, and exits at end of input. Run by `dicta bench engine|accuracy --vs
faster-whisper`; it can also be driven by hand:

    python3 bench/peers/faster_whisper_peer.py --model /path/to/tiny.en-ct2 --threads 2 \
        --compute-type int8 <<< '{"manifest": "m.jsonl", "mode": "batch", "batch_size": 1,
        "beam_size": 1, "temperatures": [0.0], "condition_on_previous_text": false,
        "without_timestamps": false, "long_form": "sequential", "overlap_seconds": 5.0}'

What runs: batch_size 1 -> WhisperModel.transcribe, one file after another (faster-whisper cannot
batch across files); batch_size > 1 -> BatchedInferencePipeline(batch_size) per file, cut into
fixed 30 s chunks (VAD off, so no clip is dropped or merged). The reply's "pipeline" says which.
"""

import argparse
import json
import os
import sys
import time


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def read_items(manifest):
    base = os.path.dirname(os.path.abspath(manifest))
    items = []
    with open(manifest) as f:
        for line in f:
            if line.strip():
                o = json.loads(line)
                items.append((o["id"], os.path.join(base, o["audio"]), o.get("duration_s")))
    return items


def fixed_chunks(duration, chunk=30.0):
    """30 s clips covering [0, duration), as BatchedInferencePipeline's clip_timestamps (seconds)."""
    clips, start = [], 0.0
    while start < duration:
        clips.append({"start": start, "end": min(start + chunk, duration)})
        start += chunk
    return clips


def transcribe_one(model, batched, path, duration, req):
    common = dict(
        language="en",
        beam_size=req["beam_size"],
        best_of=5,
        temperature=req["temperatures"],
        without_timestamps=req["without_timestamps"],
        vad_filter=False,
    )
    if batched is None:
        segments, info = model.transcribe(
            path, condition_on_previous_text=req["condition_on_previous_text"], **common
        )
    else:
        from faster_whisper.audio import decode_audio

        audio = decode_audio(path, sampling_rate=16000)
        dur = audio.shape[0] / 16000.0
        clips = fixed_chunks(dur) if dur >= 30.0 else None
        segments, info = batched.transcribe(
            audio, batch_size=req["batch_size"], clip_timestamps=clips, **common
        )
    text = "".join(s.text for s in segments).strip()
    return text, info.duration


def run(model, req):
    from faster_whisper import BatchedInferencePipeline

    items = read_items(req["manifest"])
    batched = BatchedInferencePipeline(model) if req["batch_size"] > 1 else None
    pipeline = (
        "WhisperModel.transcribe (files one after another)"
        if batched is None
        else f"BatchedInferencePipeline(batch_size={req['batch_size']}), fixed 30 s chunks, files one after another"
    )
    per_item = req["mode"] == "per_item"
    rss_reset = reset_peak_rss()
    out = {"ok": True, "pipeline": pipeline, "items": [], "audio_seconds": 0.0}
    start = time.perf_counter()
    for id_, path, duration in items:
        t = time.perf_counter()
        try:
            text, dur = transcribe_one(model, batched, path, duration, req)
            out["audio_seconds"] += dur
            item = {"id": id_, "text": text}
        except MemoryError as e:
            return {"ok": False, "error_kind": "oom", "error": f"{id_}: MemoryError {e}"}
        except Exception as e:  # one broken input fails only its own entry, as in Dicta
            item = {"id": id_, "error": f"{type(e).__name__}: {e}"}
        if per_item:
            item["seconds"] = time.perf_counter() - t
        out["items"].append(item)
    out["wall_seconds"] = time.perf_counter() - start
    if rss_reset:
        out["peak_rss_bytes"] = peak_rss_bytes()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="CTranslate2 Whisper folder (the one Dicta loads)")
    ap.add_argument("--threads", type=int, default=0, help="cpu_threads (0 = CTranslate2 default)")
    ap.add_argument("--compute-type", default="int8", help="int8, float32, ...")
    args = ap.parse_args()

    import faster_whisper
    from faster_whisper import WhisperModel

    t = time.perf_counter()
    model = WhisperModel(
        args.model, device="cpu", compute_type=args.compute_type, cpu_threads=args.threads, num_workers=1
    )
    ready = {
        "arm": "faster-whisper",
        "version": faster_whisper.__version__,
        "load_seconds": time.perf_counter() - t,
        "threads": args.threads,
        "compute_type": args.compute_type,
    }
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = run(model, json.loads(line))
        except MemoryError as e:
            reply = {"ok": False, "error_kind": "oom", "error": f"MemoryError {e}"}
        except Exception as e:
            reply = {"ok": False, "error_kind": "error", "error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
