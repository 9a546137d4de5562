#!/usr/bin/env python3
"""Decode speed of several `1bit serve` configurations, interleaved request by request.

`1bit bench` runs one configuration's phase after another, so on a shared machine whose speed
drifts by 10-20% within a minute, differences of a few percent between configurations drown. Here
every configuration's server runs at once (idle ones sleep) and each prompt goes to each
configuration in turn, so drift reaches all of them alike; the first configuration is the
reference every other is reported against: per request alone its decode tok/s
(`timings.predicted_per_second`), per batch of N requests at once (`--concurrency`) their tokens
over the wall clock; median and mean, and the drafted and accepted tokens the replies report.

  python3 bench/interleaved_decode.py --binary build/bin/1bit -m models/onebit-20m-q8_0.gguf \\
      --config off="--threads 2" --config mtp="--threads 2 --mtp models/onebit-20m-mtp-q8_0.gguf" \\
      --rounds 8 --tokens 128 --concurrency 1,4,16

A configuration's options may start with NAME=VALUE words: its server's environment
(--config logits="ONEBIT_ARGMAX_ROWS=0 --device cuda"). It may add request fields after a `|`, and use another configuration's server
with `@NAME` for its options: --config mtp0='@mtp|{"speculative.n_max": 0}'. Every other
configuration gets a server of its own (two with the same options: a control for the noise).
"""
import argparse
import json
import os
import re
import shlex
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

PROMPTS = [  # code, prose and short continuations (completions: no chat template needed)
    "def is_prime(n):\n    \"\"\"Return True if n is prime.\"\"\"\n",
    "Once upon a time, a lighthouse keeper found a message in a bottle. ",
    "import os\nimport sys\n\ndef main():\n",
    "The capital of France is",
    "class Stack:\n    def __init__(self):\n",
    "The history of the printing press begins",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def wait_ready(port, proc, what):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"interleaved_decode: the server of {what} exited ({proc.returncode}); see its log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"interleaved_decode: the server of {what} did not become ready in 60 s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default="build/bin/1bit")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--config", action="append", required=True, help='NAME="serve options[|request JSON]"')
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--concurrency", default="1",
                    help="comma-separated numbers of requests at once (above 1: total tok/s of the batch, wall clock)")
    a = ap.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    configs = []  # (name, serve options, extra request fields)
    for c in a.config:
        name, sep, rest = c.partition("=")
        if not sep or not name:
            sys.exit(f"interleaved_decode: --config {c!r}: give NAME=\"serve options\"")
        opts, _, extra = rest.partition("|")
        try:
            fields = json.loads(extra) if extra.strip() else {}
        except json.JSONDecodeError as e:
            sys.exit(f"interleaved_decode: --config {name}: the request fields after '|' are not JSON ({e})")
        configs.append((name, opts.strip(), fields))
    servers = {}  # configuration name -> (port, process)
    try:
        for name, opts, _ in configs:
            if opts.startswith("@"):
                if opts[1:] not in servers:
                    sys.exit(f"interleaved_decode: --config {name}: {opts} names no configuration before it")
                servers[name] = servers[opts[1:]]
                continue
            port = free_port()
            log = open(f"/tmp/interleaved-{port}.log", "w")
            # Leading NAME=VALUE words are the server's environment (as in a shell).
            words, env = shlex.split(opts), dict(os.environ)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                key, _, value = words.pop(0).partition("=")
                env[key] = value
            proc = subprocess.Popen([a.binary, "serve", "-m", a.model, "--port", str(port)] + words,
                                    stdout=log, stderr=subprocess.STDOUT, env=env)
            servers[name] = (port, proc)
            print(f"{name}: port {port}, log /tmp/interleaved-{port}.log", file=sys.stderr)
            wait_ready(port, proc, name)
        rates = {(name, n): [] for name, _, _ in configs for n in levels}
        drafts = {name: [0, 0] for name, _, _ in configs}
        for r in range(a.rounds):
            for prompt in PROMPTS:
                for n in levels:
                    for name, _, fields in configs:
                        body = {"prompt": prompt, "max_tokens": a.tokens, "temperature": 0, "ignore_eos": True}
                        body.update(fields)
                        start = time.perf_counter()
                        with ThreadPoolExecutor(n) as pool:
                            replies = list(pool.map(lambda _: post(servers[name][0], body), range(n)))
                        wall = time.perf_counter() - start
                        timings = [reply["timings"] for reply in replies]
                        # one request: its own decode speed; several: the batch's tokens over the wall clock
                        rates[(name, n)].append(timings[0]["predicted_per_second"] if n == 1 else
                                                sum(t["predicted_n"] for t in timings) / wall)
                        drafts[name][0] += sum(t.get("draft_n", 0) for t in timings)
                        drafts[name][1] += sum(t.get("draft_n_accepted", 0) for t in timings)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
        ref = configs[0][0]
        print(f"| config | requests at once | tok/s median | mean | best | vs {ref} (median / mean) |")
        print("|---|---|---|---|---|---|")
        for n in levels:
            ref_med, ref_mean = statistics.median(rates[(ref, n)]), statistics.mean(rates[(ref, n)])
            for name, _, _ in configs:
                xs = rates[(name, n)]
                med, mean = statistics.median(xs), statistics.mean(xs)
                print(f"| {name} | {n} | {med:.1f} | {mean:.1f} | {max(xs):.1f} | "
                      f"{med / ref_med - 1:+.1%} / {mean / ref_mean - 1:+.1%} |")
        print()
        print("| config | drafted tokens | accepted |")
        print("|---|---|---|")
        for name, _, _ in configs:
            print(f"| {name} | {drafts[name][0]} | {drafts[name][1]} |")
    finally:
        procs = {id(p): p for _, p in servers.values()}.values()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()


if __name__ == "__main__":
    main()
