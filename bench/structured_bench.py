#!/usr/bin/env python3
"""Decode speed with and without a JSON-schema constraint through `1bit serve` (issue 18's
per-token overhead): one server, one slot; each round sends the same chat request under the schema
and then free with max_tokens set to the constrained reply's length (seeded sampling, end tokens
banned), and reads the server's own decode rate (timings.predicted_per_second). The first constrained request of a schema pays the
masks' first visits (cold); later ones find them cached (warm). Prints best and median per kind
and the ratio of the medians.
    bench/structured_bench.py --binary build/bin/1bit --model models/onebit-20m-q8_0.gguf [--rounds 7]"""
import argparse
import http.client
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from serve_util import Serve  # noqa: E402

SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 60},
    "items": {"type": "array", "maxItems": 6, "items": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 40}, "qty": {"type": "integer"},
        "notes": {"type": "string", "maxLength": 200}}, "required": ["name", "qty", "notes"], "additionalProperties": False}},
    "done": {"type": "boolean"}}, "required": ["title", "items", "done"], "additionalProperties": False}


def rate(port, seed, schema, tokens, temperature):
    body = {"messages": [{"role": "user", "content": f"Write shopping list {seed} as JSON."}], "max_tokens": tokens,
            "temperature": temperature, "seed": seed, "ignore_eos": True}
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "list", "schema": schema}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = json.loads(c.getresponse().read())
    c.close()
    t = r["timings"]
    return t["predicted_per_second"], t["predicted_n"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    with Serve(args.binary, args.model, ["--parallel", "1"]) as s:
        rate(s.port, 0, None, 16, 0.0)  # warm the server up
        cold = rate(s.port, 1, SCHEMA, args.tokens, 0.0)
        for temperature in (0.0, 0.8):
            free, warm = [], []
            for r in range(args.rounds):
                # The free reply as long as the constrained one (the JSON ends it): the same positions.
                warm.append(rate(s.port, 100 + r, SCHEMA, args.tokens, temperature))
                free.append(rate(s.port, 100 + r, None, warm[-1][1], temperature))
            fmt = lambda xs: f"best {max(x for x, _ in xs):.1f}, median {statistics.median(x for x, _ in xs):.1f} tok/s " \
                             f"(median {statistics.median(n for _, n in xs):.0f} tokens)"
            ratio = statistics.median(x for x, _ in warm) / statistics.median(x for x, _ in free)
            kind = "greedy" if temperature == 0 else f"temperature {temperature}"
            print(f"{kind}: free          {fmt(free)}")
            print(f"{kind}: schema (warm) {fmt(warm)}")
            print(f"{kind}: warm/free median ratio {ratio:.3f} (per-token overhead {100 * (1 - ratio):.1f}%)")
    print(f"schema (cold): {cold[0]:.1f} tok/s over {cold[1]} tokens (the schema's first request, greedy)")

if __name__ == "__main__":
    main()
