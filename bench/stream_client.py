#!/usr/bin/env python3
"""An outside check of `1bit bench`'s concurrency row: N streamed greedy chat completions released
at once against a fresh `1bit serve`, total tokens/s = every stream's usage.completion_tokens (the
streamed content deltas when usage is absent) / the wall time from the release to the last
stream's end, and the median time to the first content delta. Each stream has its own
connection and thread; each N is measured --runs times per server. With --bench, each repetition
then runs `1bit bench --only concurrency` with the same serve options and runs, and the table
puts its samples beside ours (best / median over every repetition and run).

  python3 bench/stream_client.py --binary build/bin/1bit --model models/onebit-20m-q8_0.gguf \\
      --serve-args "--parallel 4" --streams 8,16,32 --tokens 64 --runs 3 --reps 3 --bench

Standard library only.
"""
import argparse
import http.client
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
from serve_util import Serve  # noqa: E402

SHORT = "What is the capital of France?"  # the short decode prompt of src/bench/protocol.cpp


def one_stream(port, body, release, out, i):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    release.wait()
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"stream {i}: HTTP {r.status}: {r.read()[:300]!r}")
    ttft, deltas, usage = None, 0, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        ev = json.loads(payload)
        if ev.get("usage"):
            usage = ev["usage"]
        for c in ev.get("choices") or []:
            if (c.get("delta") or {}).get("content"):
                deltas += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    end = time.perf_counter()
    conn.close()
    tokens = usage["completion_tokens"] if usage and "completion_tokens" in usage else deltas
    out[i] = (t0, end, tokens, ttft)


def measure(port, n, tokens):
    """(total tok/s, median TTFT ms, tokens) of n streams released at once."""
    out = [None] * n
    release = threading.Barrier(n + 1)
    threads = []
    for i in range(n):
        body = json.dumps({"messages": [{"role": "user", "content": f"(request {i + 1} of {n}) {SHORT}"}],
                           "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                           "stream_options": {"include_usage": True},
                           "chat_template_kwargs": {"enable_thinking": False}})
        t = threading.Thread(target=one_stream, args=(port, body, release, out, i), daemon=True)
        t.start()
        threads.append(t)
    release.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    if any(o is None for o in out):
        raise RuntimeError("a stream failed (see above)")
    wall = max(o[1] for o in out) - start
    total = sum(o[2] for o in out)
    return total / wall, statistics.median(o[3] * 1000 for o in out), total


def bench_samples(a, streams):
    """[(N, total tok/s)] from `1bit bench --only concurrency` with the same serve options and runs."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [a.binary, "bench", "-m", a.model, "--config", "c=" + a.serve_args, "--only", "concurrency",
               "--concurrency", ",".join(map(str, streams)), "--concurrency-tokens", str(a.tokens),
               "--concurrency-runs", str(a.runs), "-o", d]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        j = json.load(open(Path(d) / "bench.json"))
    return [(s["raw"]["concurrency"], s["value"]) for s in j["samples"] if s["metric"].startswith("concurrency_tps_")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/1bit")
    ap.add_argument("--model", default="models/onebit-20m-q8_0.gguf")
    ap.add_argument("--serve-args", default="--parallel 4")
    ap.add_argument("--streams", default="8,16,32")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3, help="bursts per N on each server")
    ap.add_argument("--reps", type=int, default=1, help="fresh servers (and bench runs with --bench)")
    ap.add_argument("--bench", action="store_true", help="also run `1bit bench --only concurrency` each repetition")
    a = ap.parse_args()
    streams = [int(x) for x in a.streams.split(",")]
    ours, theirs = {n: [] for n in streams}, {n: [] for n in streams}
    for rep in range(1, a.reps + 1):
        with Serve(a.binary, a.model, shlex.split(a.serve_args)) as s:
            one_stream(s.port, json.dumps({"messages": [{"role": "user", "content": SHORT}], "max_tokens": 8,
                                           "stream": True}), threading.Barrier(1), [None], 0)  # warm-up
            for n in streams:
                for _ in range(a.runs):
                    tps, ttft, total = measure(s.port, n, a.tokens)
                    ours[n].append(tps)
                    print(f"rep {rep} python N={n}: {tps:.1f} tok/s ({total} tokens), TTFT median {ttft:.0f} ms", flush=True)
        if a.bench:
            for n, v in bench_samples(a, streams):
                theirs[n].append(v)
                print(f"rep {rep} 1bit bench N={n}: {v:.1f} tok/s", flush=True)
    print("\n| N | python best / median | 1bit bench best / median |\n|---|---|---|")
    for n in streams:
        cell = lambda v: f"{max(v):.1f} / {statistics.median(v):.1f}" if v else "-"  # noqa: E731
        print(f"| {n} | {cell(ours[n])} | {cell(theirs[n])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
