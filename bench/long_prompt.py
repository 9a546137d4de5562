#!/usr/bin/env python3
"""A long prompt arriving while streams decode: do the streams keep their speed, and how late is
the prompt's first token? Starts `1bit serve`, then:

1. idle: the long prompt alone (cache off), its time to first token (TTFT) = its prefill time;
2. busy: N streams decoding (greedy, long replies); their token rate over a quiet window; then the
   long prompt (cache off), its TTFT, and the streams' token rate while it was being prefilled;
3. cached: while the streams still decode, the long prompt with a new ending and the cache on:
   its TTFT against the cold (idle) one, and the prompt tokens it took from the cache.

Prints the rates, their ratio and the TTFT ratios; repeats --rounds times (best and median).
Standard library only.

  python3 bench/long_prompt.py --binary build/bin/1bit --model MODEL.gguf --streams 8 --prompt-tokens 1800
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
from serve_util import Serve  # noqa: E402

WORDS = ("the cat sat on a warm mat while rain fell over the quiet town and a small boy read "
         "his book about ships stars dragons and the long road home").split()


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    c.close()
    return data


def ttft(port, body):
    """(seconds to the first streamed token, prompt tokens taken from the cache)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/completions",
              body=json.dumps(dict(body, stream=True, max_tokens=2, stream_options={"include_usage": True})),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, cached = None, None
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: ") and first is None and b'"text"' in line:
            first = time.time() - t0
        if line.startswith(b"data: {") and b'"usage"' in line:
            usage = json.loads(line[6:]).get("usage") or {}
            cached = usage.get("prompt_tokens_details", {}).get("cached_tokens")
    c.close()
    return first, cached


class Streamer(threading.Thread):
    """One greedy stream; records the arrival time of every token event."""

    def __init__(self, port, prompt, n):
        super().__init__(daemon=True)
        self.port, self.prompt, self.n, self.times = port, prompt, n, []

    def run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": self.prompt, "max_tokens": self.n,
                                                              "temperature": 0, "ignore_eos": True, "stream": True}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        while True:
            line = r.readline()
            if not line:
                break
            if line.startswith(b"data: ") and b'"text"' in line:
                self.times.append(time.time())
        c.close()


def rate(streams, t0, t1):
    """Tokens per second of all streams together in [t0, t1)."""
    n = sum(1 for s in streams for t in s.times if t0 <= t < t1)
    return n / (t1 - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/1bit")
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=1800)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=4.0, help="seconds of the quiet decode window")
    ap.add_argument("--serve-args", default="", help="extra '1bit serve' options")
    a = ap.parse_args()
    args = ["--device", "cpu", "-c", "4096", "--parallel", str(a.streams + 1), "--threads", str(a.threads)]
    args += a.serve_args.split()
    # A prompt of about --prompt-tokens tokens (words are mostly one token each).
    words = [WORDS[(i * 7) % len(WORDS)] for i in range(a.prompt_tokens)]
    long_body = {"prompt": " ".join(words), "temperature": 0, "cache_prompt": False}
    results = []
    for r in range(a.rounds):
        with Serve(a.binary, a.model, args) as s:  # a fresh server each round
            port = s.port
            n_long = post(port, dict(long_body, max_tokens=1))["usage"]["prompt_tokens"]
            idle, _ = ttft(port, long_body)
            streams = [Streamer(port, f"Story {i}: once upon a time", 2000) for i in range(a.streams)]
            for st in streams:
                st.start()
            time.sleep(2.0)  # every stream decoding
            t0 = time.time()
            time.sleep(a.window)
            t1 = time.time()
            busy, _ = ttft(port, long_body)
            t2 = time.time()
            hit, cached = ttft(port, dict(long_body, prompt=long_body["prompt"] + " and then", cache_prompt=True))
            quiet_rate, prefill_rate = rate(streams, t0, t1), rate(streams, t1, t2)
            results.append((quiet_rate, prefill_rate, idle, busy, hit))
            print(f"round {r + 1}: {a.streams} streams {quiet_rate:.1f} tok/s quiet, {prefill_rate:.1f} tok/s while a "
                  f"{n_long}-token prompt is prefilled ({prefill_rate / quiet_rate:.2f}); its TTFT idle {idle:.2f} s, "
                  f"busy {busy:.2f} s ({busy / idle:.2f}x); the same prefix again, busy: {cached} tokens cached, "
                  f"TTFT {hit:.3f} s ({100 * hit / idle:.1f}% of idle cold)", flush=True)
    ratios = [p / q for q, p, _, _, _ in results]
    slow = [b / i for _, _, i, b, _ in results]
    hits = [h / i for _, _, i, _, h in results]
    print(f"decode speed kept while prefilling: best {max(ratios):.2f}, median {statistics.median(ratios):.2f}; "
          f"TTFT busy / idle: best {min(slow):.2f}x, median {statistics.median(slow):.2f}x; "
          f"cached TTFT / cold: best {100 * min(hits):.1f}%, median {100 * statistics.median(hits):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
