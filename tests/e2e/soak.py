#!/usr/bin/env python3
"""Soak test of `1bit serve` from outside: many concurrent clients, a mix of requests, checks.

Starts the server, computes the solo greedy reply of every (prompt, max_tokens) it will use, then
sends --requests requests from --clients threads: greedy whole replies and streams (each must equal
its solo reply), streams cancelled mid-way (the client closes the socket), greedy requests with a
stop string (the reply must be the solo text cut before it), sampled requests, and bad requests
(each must get its 4xx). Afterwards: every K/V block free (/metrics), the server healthy, resident
memory flat after warm-up. Standard library only. Exit 0 when everything held, else 1.

  python3 tests/e2e/soak.py --binary build/bin/1bit --model models/onebit-20m-q8_0.gguf \\
      --requests 2000 --clients 64 --parallel 16
"""
import argparse
import http.client
import json
import random
import subprocess
import sys
import threading
import time

from serve_util import free_port, rss_kib

WORDS = ("the cat sat on a warm mat while rain fell over the quiet town and a small boy read "
         "his book about ships stars dragons and the long road home").split()


class Client:
    def __init__(self, port, timeout=300):
        self.port, self.timeout = port, timeout

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    def post(self, path, body, raw=None):
        """(status, parsed JSON or None). status 0: the connection failed."""
        c = self.conn()
        try:
            data = raw if raw is not None else json.dumps(body)
            c.request("POST", path, body=data, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            text = r.read()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, None
        except (OSError, http.client.HTTPException):
            return 0, None
        finally:
            c.close()

    def get(self, path):
        c = self.conn()
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            return 0, ""
        finally:
            c.close()

    def stream(self, path, body, stop_after=None):
        """Concatenated text of an SSE stream, whether [DONE] came; stop_after: close after N events."""
        c = self.conn()
        text, done, events = "", False, 0
        try:
            c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                return r.status, text, done
            buf = b""
            while True:
                chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
                if not chunk:
                    break
                buf += chunk
                while b"\n\n" in buf:
                    ev, buf = buf.split(b"\n\n", 1)
                    for line in ev.split(b"\n"):
                        if not line.startswith(b"data: "):
                            continue
                        payload = line[6:]
                        if payload == b"[DONE]":
                            done = True
                            continue
                        j = json.loads(payload)
                        for ch in j.get("choices", []):
                            text += ch.get("text", "")
                        events += 1
                        if stop_after is not None and events >= stop_after:
                            return 200, text, False  # the client leaves mid-stream
            return 200, text, done
        except (OSError, http.client.HTTPException, ValueError):
            return 0, text, done
        finally:
            c.close()


def metric(client, name):
    status, text = client.get("/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/1bit")
    ap.add_argument("--model", default="models/onebit-20m-q8_0.gguf")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)

    port = free_port()
    server = subprocess.Popen([a.binary, "serve", "-m", a.model, "--port", str(port), "--device", "cpu",
                               "-c", str(a.ctx), "--parallel", str(a.parallel), "--threads", str(a.threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cl = Client(port)
    failures = []
    try:
        for _ in range(600):
            if cl.get("/health")[0] == 200:
                break
            if server.poll() is not None:
                print("soak: the server exited:", server.stderr.read(), file=sys.stderr)
                return 1
            time.sleep(0.1)

        # Prompts: a long shared preamble with different endings (prefix-cache hits), and short ones.
        preamble = " ".join(rng.choice(WORDS) for _ in range(300))
        prompts = [preamble + " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40))) for _ in range(8)]
        prompts += [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 60))) for _ in range(8)]
        lengths = [8, 24, 48]
        solo = {}
        t0 = time.time()
        for i, p in enumerate(prompts):
            for n in lengths:
                st, j = cl.post("/v1/completions", {"prompt": p, "max_tokens": n, "temperature": 0, "cache_prompt": False})
                if st != 200:
                    print(f"soak: solo request failed with {st}", file=sys.stderr)
                    return 1
                solo[(i, n)] = j["choices"][0]["text"]
        print(f"soak: {len(solo)} solo replies in {time.time() - t0:.1f} s", flush=True)

        bad = [
            ("/v1/completions", None, "{not json", 400),
            ("/v1/completions", {"prompt": "hi", "max_tokens": -3}, None, 400),
            ("/v1/completions", {"prompt": "hi", "temperature": "hot"}, None, 400),
            ("/v1/completions", {"prompt": "hi " * (a.ctx * 2), "max_tokens": 4}, None, 400),
            ("/v1/completions", {"max_tokens": 4}, None, 400),
            ("/v1/chat/completions", {"messages": "not a list"}, None, 400),
        ]
        counts = {"whole": 0, "stream": 0, "cancel": 0, "stop": 0, "sampled": 0, "bad": 0}
        lock = threading.Lock()
        rss = []
        next_req = [0]

        def one(k):
            kind = rng.choices(list(counts), weights=[35, 25, 10, 10, 10, 10])[0]
            i, n = rng.randrange(len(prompts)), rng.choice(lengths)
            want = solo[(i, n)]
            body = {"prompt": prompts[i], "max_tokens": n, "temperature": 0}
            if kind == "whole":
                st, j = cl.post("/v1/completions", body)
                ok = st == 200 and j["choices"][0]["text"] == want
            elif kind == "stream":
                st, text, done = cl.stream("/v1/completions", dict(body, stream=True))
                ok = st == 200 and done and text == want
            elif kind == "cancel":
                st, text, done = cl.stream("/v1/completions", dict(body, stream=True, max_tokens=48), stop_after=rng.randint(1, 4))
                ok = st == 200 and solo[(i, 48)].startswith(text)
            elif kind == "stop":
                cut = want[len(want) // 3: len(want) // 3 + 3]
                if len(cut) < 3:
                    st, j = cl.post("/v1/completions", body)
                    ok = st == 200 and j["choices"][0]["text"] == want
                else:
                    st, j = cl.post("/v1/completions", dict(body, stop=[cut]))
                    ok = st == 200 and j["choices"][0]["text"] == want[:want.find(cut)] and j["choices"][0]["finish_reason"] == "stop"
            elif kind == "sampled":
                st, j = cl.post("/v1/completions", dict(body, temperature=0.9, seed=k))
                ok = st == 200 and isinstance(j["choices"][0]["text"], str)
            else:
                path, b, raw, code = rng.choice(bad)
                st, j = cl.post(path, b, raw=raw)
                ok = st == code and j is not None and "error" in j
            with lock:
                counts[kind] += 1
                if not ok:
                    failures.append(f"request {k} ({kind}): status {st}")

        def worker():
            while True:
                with lock:
                    k = next_req[0]
                    if k >= a.requests:
                        return
                    next_req[0] += 1
                one(k)
                if k % 100 == 0:
                    with lock:
                        rss.append((k, rss_kib(server.pid)))

        t0 = time.time()
        threads = [threading.Thread(target=worker) for _ in range(a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        time.sleep(0.5)  # cancelled streams are noticed at the next step
        used = metric(cl, "onebit_kv_blocks_used")
        health = cl.get("/health")[0]
        rss.sort()
        print(f"soak: {a.requests} requests from {a.clients} clients in {wall:.1f} s: " +
              ", ".join(f"{k} {v}" for k, v in counts.items()))
        print("soak: resident KiB by request:", " ".join(f"{k}:{v}" for k, v in rss))
        print(f"soak: K/V blocks used after: {used}, preemptions {metric(cl, 'onebit_preemptions_total')}, "
              f"prefix-cache hit tokens {metric(cl, 'onebit_prefix_cache_hit_tokens_total')}, health {health}")
        if used != 0:
            failures.append(f"{used} K/V blocks still held after every request ended")
        if health != 200:
            failures.append(f"/health is {health} after the soak")
        if len(rss) >= 8:
            warm = max(v for _, v in rss[len(rss) // 4: len(rss) // 2])
            last = max(v for _, v in rss[-len(rss) // 4:])
            if last > warm * 1.10 + 16384:
                failures.append(f"resident memory grew from {warm} KiB (after warm-up) to {last} KiB")
        if server.poll() is not None:
            failures.append("the server exited")
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
    for f in failures[:20]:
        print("soak: FAIL", f, file=sys.stderr)
    print("soak:", "ok" if not failures else f"{len(failures)} failures")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
