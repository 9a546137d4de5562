#!/usr/bin/env python3
"""HTTP load on a server: requests per second and latency of short completions at several client
counts, and the memory an idle open connection costs. Runs `1bit serve` (or any server command
given with --server-cmd, e.g. llama-server, with {port} in it), then for each N of --clients: N
threads, each on its own keep-alive connection, send greedy completions of --tokens tokens back to
back for --seconds; reports requests/s, p50 and p99 latency, and failures. Then opens --idle
connections that send nothing and reports the server's resident memory before and after.

  python3 bench/http_load.py --binary build/bin/1bit --model models/onebit-20m-q8_0.gguf \\
      --serve-args "--device cpu --parallel 64 --threads 2" --clients 1,64,512
  python3 bench/http_load.py --model models/onebit-20m-q8_0.gguf \\
      --server-cmd "/path/llama-server -m models/onebit-20m-q8_0.gguf --port {port} -np 64 -t 2 -c 65536"

Standard library only.
"""
import argparse
import http.client
import json
import resource
import shlex
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
from serve_util import Serve, rss_kib  # noqa: E402


def load(port, clients, seconds, tokens):
    """(requests/s, p50 ms, p99 ms, failures) of `clients` threads sending completions."""
    latencies, failures = [], []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": tokens, "temperature": 0})

    def client(i):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        mine, bad = [], 0
        barrier.wait()
        end = time.time() + seconds
        while time.time() < end:
            t0 = time.time()
            try:
                conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                if r.status == 200:
                    mine.append(time.time() - t0)
                else:
                    bad += 1
            except OSError:
                bad += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        conn.close()
        with lock:
            latencies.extend(mine)
            failures.append(bad)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.time()
    for t in threads:
        t.join()
    wall = time.time() - t0
    latencies.sort()
    if not latencies:
        return 0.0, 0.0, 0.0, sum(failures)
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    return len(latencies) / wall, statistics.median(latencies) * 1000, p(0.99), sum(failures)


def idle_cost(port, pid, n):
    """Resident KiB of the server before and after `n` idle connections are open."""
    time.sleep(1.0)
    before = rss_kib(pid)
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    time.sleep(1.0)
    after = rss_kib(pid)
    for s in socks:
        s.close()
    return before, after


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/1bit")
    ap.add_argument("--model", required=True)
    ap.add_argument("--serve-args", default="--device cpu --parallel 64 --threads 2")
    ap.add_argument("--server-cmd", default="", help="another server's command line, with {port}")
    ap.add_argument("--clients", default="1,64,512")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--idle", type=int, default=1000)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = Serve(cmd=shlex.split(a.server_cmd)) if a.server_cmd else Serve(a.binary, a.model, a.serve_args.split())
    with server as s:
        print("| clients | requests/s | p50 ms | p99 ms | failed |\n|---|---|---|---|---|")
        for n in (int(x) for x in a.clients.split(",")):
            rps, p50, p99, bad = load(s.port, n, a.seconds, a.tokens)
            print(f"| {n} | {rps:.1f} | {p50:.0f} | {p99:.0f} | {bad} |", flush=True)
        before, after = idle_cost(s.port, s.proc.pid, a.idle)
        print(f"\nresident memory: {before} KiB, with {a.idle} idle connections {after} KiB "
              f"({(after - before) / a.idle:.1f} KiB each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
