#!/usr/bin/env python3
"""Hostile and busy clients against `1bit serve`, from outside (issue 14's acceptance suite):

- slowloris: N sockets dripping one header byte a second; normal requests answer within 1 s;
- idle: N open connections that send nothing; normal requests answer within 1 s;
- streams: N streamed completions released at once; each gets its response headers within 1 s
  and ends with [DONE];
- bursts: R rounds of C clients connecting at the same moment; no connection is reset;
- pipelining: requests written in one go are all answered, in order, each as it is alone;
- framing: malformed and oversized requests answered at once with their status, then closed;
- storm: rounds of concurrent 12-16 MB bodies (400,000 empty messages; a 15 MB prompt); each is
  refused, and the server's resident memory ends within 10% of where it was after one round.

Afterwards the server must be healthy and running. Standard library only; exit 0 when everything
held, else 1.

  python3 tests/e2e/hostile.py --binary build/bin/1bit --model models/onebit-20m-q8_0.gguf
"""
import argparse
import http.client
import json
import resource
import socket
import sys
import threading
import time

from serve_util import Serve, rss_kib

failures = []


def fail(case, message):
    failures.append(f"{case}: {message}")
    print(f"hostile: FAIL {case}: {message}", file=sys.stderr)


def timed(port, method, path, body=None, timeout=30):
    """(status, seconds, body bytes); status 0 when the connection failed. A str body is sent as is."""
    t0 = time.time()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request(method, path, body=body if body is None or isinstance(body, str) else json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, time.time() - t0, data
    except OSError as e:
        return 0, time.time() - t0, str(e).encode()


def normal_requests(port, case, seconds, limit_s=1.0):
    """Alternates /health and a 2-token completion for `seconds`; every one must answer in time."""
    worst, n = 0.0, 0
    end = time.time() + seconds
    while time.time() < end:
        for method, path, body in (("GET", "/health", None),
                                   ("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 2, "temperature": 0})):
            status, dt, data = timed(port, method, path, body)
            worst, n = max(worst, dt), n + 1
            if status != 200:
                fail(case, f"{method} {path} got {status}: {data[:200]!r}")
            elif dt > limit_s:
                fail(case, f"{method} {path} took {dt:.2f} s (limit {limit_s} s)")
        time.sleep(0.2)
    return n, worst


def slowloris(port, n, seconds):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(s)
    stop = threading.Event()

    def drip():
        while not stop.wait(1.0):
            for s in socks:
                try:
                    s.send(b"X")
                except OSError:
                    pass

    t = threading.Thread(target=drip, daemon=True)
    t.start()
    count, worst = normal_requests(port, "slowloris", seconds)
    stop.set()
    t.join()
    for s in socks:
        s.close()
    print(f"hostile: slowloris: {n} dripping sockets; {count} normal requests, slowest {worst * 1000:.0f} ms")


def idle(port, n, seconds):
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    count, worst = normal_requests(port, "idle", seconds)
    # The idle ones are still open (they cost memory, not a thread, and are not cut early).
    open_ = 0
    for s in socks:
        s.setblocking(False)
        try:
            open_ += 1 if s.recv(1) else 0
        except BlockingIOError:
            open_ += 1
        except OSError:
            pass
        s.close()
    if open_ != n:
        fail("idle", f"only {open_} of {n} idle connections were still open after {seconds} s")
    print(f"hostile: idle: {n} open connections; {count} normal requests, slowest {worst * 1000:.0f} ms")


def streams(port, n, tokens):
    barrier = threading.Barrier(n + 1)
    heads, ends, errors = [None] * n, [None] * n, []

    def one(i):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            barrier.wait()
            t0 = time.time()
            c.request("POST", "/v1/completions",
                      body=json.dumps({"prompt": f"Story {i}:", "max_tokens": tokens, "temperature": 0,
                                       "ignore_eos": True, "stream": True}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            heads[i] = (r.status, time.time() - t0)
            last = b""
            for line in r:
                if line.startswith(b"data: "):
                    last = line.strip()
            ends[i] = last == b"data: [DONE]"
            c.close()
        except Exception as e:  # noqa: BLE001: every failure is reported
            errors.append(f"stream {i}: {e!r}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.time()
    for t in threads:
        t.join()
    wall = time.time() - t0
    for e in errors[:5]:
        fail("streams", e)
    bad = [h for h in heads if h is None or h[0] != 200]
    slow = [h[1] for h in heads if h is not None and h[1] > 1.0]
    if bad:
        fail("streams", f"{len(bad)} of {n} streams got no 200 (first: {bad[0]})")
    if slow:
        fail("streams", f"{len(slow)} of {n} streams waited more than 1 s for their headers (worst {max(slow):.2f} s)")
    if sum(1 for e in ends if e) != n:
        fail("streams", f"only {sum(1 for e in ends if e)} of {n} streams ended with [DONE]")
    worst = max((h[1] for h in heads if h is not None), default=0)
    print(f"hostile: streams: {n} at once, headers within {worst * 1000:.0f} ms, all done in {wall:.1f} s")


def bursts(port, rounds, clients):
    barrier = threading.Barrier(clients)
    errors = []

    def client():
        for _ in range(rounds):
            barrier.wait()
            status, _, data = timed(port, "GET", "/health", timeout=30)
            if status != 200:
                errors.append(f"{status} {data[:100]!r}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fail("bursts", f"{len(errors)} of {rounds * clients} requests failed (first: {errors[0]})")
    print(f"hostile: bursts: {rounds} rounds of {clients} clients at once in {time.time() - t0:.1f} s, "
          f"{len(errors)} failures")


def read_response(f):
    """(status, body) of one HTTP/1.1 response with Content-Length from a socket file."""
    status = int(f.readline().split()[1])
    length = 0
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    return status, f.read(length)


def pipelining(port):
    requests = [("GET", "/health", None), ("GET", "/v1/models", None),
                ("POST", "/tokenize", {"content": "hello world"}),
                ("POST", "/v1/completions", {"prompt": "Once upon", "max_tokens": 4, "temperature": 0})]
    alone = []
    for method, path, body in requests:
        status, _, data = timed(port, method, path, body)
        alone.append((status, json.loads(data)))
    wire = b""
    for method, path, body in requests:
        data = b"" if body is None else json.dumps(body).encode()
        wire += (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n").encode() + data
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(wire)
    f = s.makefile("rb")
    for i, (method, path, _) in enumerate(requests):
        status, body = read_response(f)
        got = json.loads(body)
        if "created" in got:  # completions carry their time and id
            got.pop("created"), got.pop("id", None), alone[i][1].pop("created", None), alone[i][1].pop("id", None)
            got.pop("timings", None), alone[i][1].pop("timings", None)
        if (status, got) != alone[i]:
            fail("pipelining", f"reply {i} ({method} {path}) differs from the same request alone: {status} {got} vs {alone[i]}")
    s.close()
    print(f"hostile: pipelining: {len(requests)} requests in one write answered in order")


FRAMING = [
    ("garbage", b"GARBAGE\r\n\r\n", 400),
    ("no Host", b"GET /health HTTP/1.1\r\n\r\n", 400),
    ("Content-Length with Transfer-Encoding",
     b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    ("two lengths", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", 400),
    ("bad length", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n", 400),
    ("body over the limit", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 17000000\r\n\r\n", 413),
    ("HTTP/2", b"GET /health HTTP/2.0\r\n\r\n", 505),
    ("gzip transfer coding", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    ("huge header", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 431),
    ("many headers", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(120)) + b"\r\n", 431),
    ("bad chunk", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    ("folded header", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\r\n b\r\n\r\n", 400),
    ("control byte", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\x01b\r\n\r\n", 400),
    ("unknown expectation", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n", 417),
    ("space before colon", b"GET /health HTTP/1.1\r\nHost : 127.0.0.1\r\n\r\n", 400),
]


def framing(port):
    worst = 0.0
    for name, wire, want in FRAMING:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        t0 = time.time()
        s.sendall(wire)
        got = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                got += b
        except OSError as e:
            fail("framing", f"{name}: {e!r} before the server closed")
        dt = time.time() - t0
        worst = max(worst, dt)
        s.close()
        status = int(got.split()[1]) if got.startswith(b"HTTP/1.1 ") else 0
        if status != want:
            fail("framing", f"{name}: got {status} ({got[:120]!r}), want {want}")
        elif b'"message"' not in got:
            fail("framing", f"{name}: no error message in {got[:200]!r}")
        if dt > 1.0:
            fail("framing", f"{name}: answered after {dt:.2f} s")
    # Half a body, then the client leaves: nothing to answer, nothing breaks.
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"pro")
    s.close()
    print(f"hostile: framing: {len(FRAMING)} malformed requests answered, slowest {worst * 1000:.0f} ms")


def storm(port, pid, rounds, concurrent):
    if rounds <= 0:
        return
    messages = json.dumps({"messages": [{"role": "user", "content": ""}] * 400000, "max_tokens": 1})
    prompt = json.dumps({"prompt": "word " * 3000000, "max_tokens": 1})
    statuses = {}

    def one(body):
        path = "/v1/chat/completions" if body.startswith('{"messages"') else "/v1/completions"
        status, _, _ = timed(port, "POST", path, body, timeout=300)
        statuses[status] = statuses.get(status, 0) + 1

    def round_():
        threads = [threading.Thread(target=one, args=(messages if i % 2 == 0 else prompt,)) for i in range(concurrent)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def settled(limit=None):
        """Resident KiB once the server has given back what it frees after a reply (it trims its
        heap after a big request, on a worker, possibly after the client has its answer): the
        first sample at or under `limit`, else the last of 10 s of samples."""
        value = rss_kib(pid)
        for _ in range(40):
            if limit is not None and value <= limit:
                break
            time.sleep(0.25)
            value = rss_kib(pid)
        return value

    round_()  # warm-up: the allocator's first growth is not a leak
    time.sleep(1.0)
    start = rss_kib(pid)
    peak = start
    for _ in range(rounds):
        round_()
        peak = max(peak, rss_kib(pid))
    end = settled(limit=start * 1.10)
    bad = {k: v for k, v in statuses.items() if k not in (400, 413)}
    if bad:
        fail("storm", f"oversized requests got {bad} (want 400 or 413)")
    if end > start * 1.10:
        fail("storm", f"resident memory grew from {start} KiB to {end} KiB after {rounds} rounds")
    print(f"hostile: storm: {rounds} rounds of {concurrent} oversized bodies ({statuses}); resident "
          f"{start} KiB -> peak {peak} -> {end} KiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/1bit")
    ap.add_argument("--model", required=True)
    ap.add_argument("--slowloris", type=int, default=500)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--streams", type=int, default=300)
    ap.add_argument("--stream-tokens", type=int, default=8)
    ap.add_argument("--burst-rounds", type=int, default=200)
    ap.add_argument("--burst-clients", type=int, default=64)
    ap.add_argument("--storm-rounds", type=int, default=4)
    ap.add_argument("--storm-concurrent", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0, help="how long normal requests run beside each attack")
    ap.add_argument("--serve-args", default="--device cpu --parallel 64 --threads 2")
    a = ap.parse_args()
    # Enough descriptors for every socket this client opens.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with Serve(a.binary, a.model, a.serve_args.split()) as s:
        framing(s.port)
        pipelining(s.port)
        slowloris(s.port, a.slowloris, a.seconds)
        idle(s.port, a.idle, a.seconds)
        streams(s.port, a.streams, a.stream_tokens)
        bursts(s.port, a.burst_rounds, a.burst_clients)
        storm(s.port, s.proc.pid, a.storm_rounds, a.storm_concurrent)
        status, _, _ = timed(s.port, "GET", "/health")
        if status != 200:
            fail("after", f"/health is {status}")
        if s.proc.poll() is not None:
            fail("after", f"the server exited ({s.proc.returncode})")
    print("hostile:", "ok" if not failures else f"{len(failures)} failures")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
