#!/usr/bin/env python3
"""Opens `dicta serve`'s page in headless Chromium whose fake microphone plays a real recording,
clicks #start and waits until the recording's words appear in #transcript; saves a screenshot.

Driven over the Chrome DevTools Protocol with the `websockets` client (no browser-automation
package needed). Run by tests/serve_browser.rs; exits non-zero with a message on failure.
"""

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from websockets.sync.client import connect


class Page:
    def __init__(self, ws_url):
        self.ws = connect(ws_url, max_size=None, open_timeout=20)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        me = self.next_id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == me:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--wav", required=True, help="the recording the fake microphone plays")
    ap.add_argument("--expect", required=True, help="comma-separated words that must appear")
    ap.add_argument("--key", default="")
    ap.add_argument("--endpoint", default="", help="the page's 'Utterances end' choice: '', 'on' or 'off'")
    ap.add_argument("--expect-status", default="", help="text #status must hold once the words are there")
    ap.add_argument("--screenshot", required=True)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--timeout", type=float, default=90)
    a = ap.parse_args()

    profile = tempfile.mkdtemp(prefix="dicta-chromium-")
    proc = subprocess.Popen(
        [
            a.chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--remote-debugging-port=0", "--window-size=1000,640",
            "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={a.wav}", "--autoplay-policy=no-user-gesture-required",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.time() + 30
        while not os.path.exists(port_file):
            if time.time() > deadline or proc.poll() is not None:
                sys.exit("FAILED: chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        time.sleep(0.2)
        port = open(port_file).read().split()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json"))
        page = Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call("Page.navigate", url=a.url)
        deadline = time.time() + 20
        while page.eval("document.readyState") != "complete" or page.eval("!!document.getElementById('start')") is not True:
            if time.time() > deadline:
                sys.exit("FAILED: the page did not load")
            time.sleep(0.1)
        if a.key:
            page.eval(f"(() => {{ const k = document.getElementById('key'); k.value = {json.dumps(a.key)}; k.dispatchEvent(new Event('change')); }})()")
        if a.endpoint:
            page.eval(f"document.getElementById('endpoint').value = {json.dumps(a.endpoint)}")
        page.eval("document.getElementById('start').click()")
        want = [w.strip().lower() for w in a.expect.split(",") if w.strip()]
        deadline = time.time() + a.timeout
        text = ""
        while True:
            text = page.eval("document.getElementById('transcript').innerText") or ""
            if all(w in text.lower() for w in want):
                break
            if time.time() > deadline:
                status = page.eval("document.getElementById('status').textContent")
                sys.exit(f"FAILED: after {a.timeout} s #transcript is {text!r} (status {status!r}); wanted {want}")
            time.sleep(0.5)
        status = page.eval("document.getElementById('status').textContent")
        if a.expect_status not in status:
            sys.exit(f"FAILED: #status is {status!r}, wanted it to hold {a.expect_status!r}")
        png = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
        with open(a.screenshot, "wb") as f:
            f.write(png)
        page.eval("document.getElementById('start').click()")
        print(json.dumps({"ok": True, "transcript": text, "status": status}))
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
