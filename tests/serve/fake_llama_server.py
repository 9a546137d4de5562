#!/usr/bin/env python3
"""A recording fake llama-server for tests of `1bit serve`'s child routes.

Appends one JSON line {"pid", "argv", "env"} to the file named by $RECORD, then serves /health,
/v1/models, canned completions (streamed and not), /tokenize, /props and /metrics on --port.
Knobs: FAKE_READY_DELAY_S (health is 503 until then), FAKE_DELAY_MS (time a completion takes),
FAKE_EXIT_ONCE (below).
Its name in replies is its --device value (Vulkan0, ROCm0...), or "cpu".

For `1bit bench`, completions carry `usage` and llama-server `timings` whose numbers are a
deterministic function of the request and argv, never measured:
  prompt_tokens = 1 + len(prompt text) // 4 (chat: the messages' contents joined);
  completion_tokens = max_tokens (absent: 5, the canned reply), and a stream sends that many
  content chunks; prompt speed = FAKE_PROMPT_TPS (100) x NP, decode speed = FAKE_DECODE_TPS (20)
  x NP, where NP is the -np value (1 without it); a prompt seen before with cache_prompt (default
  true) is FAKE_CACHE_SPEEDUP (10) times faster; with a drafter (-md) timings also carry
  draft_n = completion_tokens, draft_n_accepted = 3/4 of it, and draft_steps = draft_n / 4;
  FAKE_NO_TIMINGS=1 leaves timings out (a route that does not report them).
Each POST body is appended as one JSON line {"path", "body"} to $RECORD_REQUESTS when set.
"""
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGV = sys.argv[1:]
PORT = int(ARGV[ARGV.index("--port") + 1])
NAME = ARGV[ARGV.index("--device") + 1] if "--device" in ARGV else "cpu"
START = time.time()
READY_DELAY = float(os.environ.get("FAKE_READY_DELAY_S", "0"))
DELAY = float(os.environ.get("FAKE_DELAY_MS", "0")) / 1000.0
NP = int(ARGV[ARGV.index("-np") + 1]) if "-np" in ARGV else 1
PROMPT_TPS = float(os.environ.get("FAKE_PROMPT_TPS", "100")) * NP
DECODE_TPS = float(os.environ.get("FAKE_DECODE_TPS", "20")) * NP
CACHE_SPEEDUP = float(os.environ.get("FAKE_CACHE_SPEEDUP", "10"))
DRAFTER = "-md" in ARGV
SEEN_PROMPTS = set()
LOCK = threading.Lock()


def prompt_text(req):
    if "messages" in req and isinstance(req["messages"], list):
        return "\n".join(str(m.get("content", "")) for m in req["messages"] if isinstance(m, dict))
    p = req.get("prompt", "")
    return p if isinstance(p, str) else json.dumps(p)


def usage_and_timings(req):
    """The usage and timings this request reports (see the module docstring); remembers the prompt."""
    text = prompt_text(req)
    prompt_tokens = 1 + len(text) // 4
    max_tokens = req.get("max_tokens")
    completion_tokens = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else 5
    with LOCK:
        cached = req.get("cache_prompt", True) is not False and text in SEEN_PROMPTS
        if req.get("cache_prompt", True) is not False:
            SEEN_PROMPTS.add(text)
    prompt_ms = 1000.0 * prompt_tokens / (PROMPT_TPS * (CACHE_SPEEDUP if cached else 1.0))
    predicted_ms = 1000.0 * completion_tokens / DECODE_TPS
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": prompt_tokens + completion_tokens}
    timings = {"cache_n": prompt_tokens - 1 if cached else 0, "prompt_n": 1 if cached else prompt_tokens,
               "prompt_ms": prompt_ms, "prompt_per_second": (1 if cached else prompt_tokens) * 1000.0 / prompt_ms,
               "predicted_n": completion_tokens, "predicted_ms": predicted_ms, "predicted_per_second": DECODE_TPS}
    if os.environ.get("FAKE_NO_TIMINGS"):
        timings = None
    elif DRAFTER:
        timings.update({"draft_n": completion_tokens, "draft_n_accepted": completion_tokens * 3 // 4,
                        "draft_steps": max(1, completion_tokens // 4)})
    return usage, timings


def record_request(path, req):
    if os.environ.get("RECORD_REQUESTS"):
        with LOCK, open(os.environ["RECORD_REQUESTS"], "a") as f:
            f.write(json.dumps({"path": path, "body": req}) + "\n")


if os.environ.get("RECORD"):
    with open(os.environ["RECORD"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "argv": ARGV, "env": dict(os.environ)}) + "\n")

# FAKE_EXIT_ONCE=PATH: the first start (PATH absent: made now) exits 1 before serving, as a
# llama-server whose port another program took between the front's probe and its bind.
if os.environ.get("FAKE_EXIT_ONCE") and not os.path.exists(os.environ["FAKE_EXIT_ONCE"]):
    open(os.environ["FAKE_EXIT_ONCE"], "w").close()
    sys.exit("fake llama-server: exiting before serving (FAKE_EXIT_ONCE)")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, obj, ctype="application/json"):
        body = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            ready = time.time() - START >= READY_DELAY
            self.reply(200 if ready else 503, {"status": "ok" if ready else "loading"})
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        elif self.path == "/props":
            self.reply(200, {"backend": NAME})
        elif self.path == "/metrics":
            self.reply(200, "llamacpp:requests_processing 0\n", "text/plain")
        else:
            self.reply(404, {"error": {"code": 404, "message": "not found", "type": "not_found_error"}})

    def chunk(self, data):
        raw = data.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
        self.wfile.flush()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        try:
            req = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self.reply(400, {"error": {"code": 400, "message": "bad json", "type": "invalid_request_error"}})
        if self.path == "/tokenize":
            return self.reply(200, {"tokens": [1, 2, 3], "backend": NAME})
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self.reply(404, {"error": {"code": 404, "message": "not found", "type": "not_found_error"}})
        if not isinstance(req, dict):
            return self.reply(400, {"error": {"code": 400, "message": "not an object", "type": "invalid_request_error"}})
        record_request(self.path, req)
        if req.get("max_tokens") == -7:  # a canned upstream error, for relaying tests
            return self.reply(400, {"error": {"code": 400, "message": "max_tokens", "type": "invalid_request_error"}})
        usage, timings = usage_and_timings(req)
        finish = "length" if "max_tokens" in req else "stop"
        if not req.get("stream"):
            time.sleep(DELAY)
            return self.reply(200, {"id": "x", "object": "chat.completion", "model": "fake-model",
                                    "backend": NAME,
                                    "choices": [{"index": 0, "finish_reason": finish, "text": "hello from " + NAME,
                                                 "message": {"role": "assistant", "content": "hello from " + NAME}}],
                                    "usage": usage, **({"timings": timings} if timings else {})})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n = usage["completion_tokens"]
        for i in range(n):
            time.sleep(DELAY / n)
            ev = {"object": "chat.completion.chunk", "model": "fake-model", "backend": NAME,
                  "choices": [{"index": 0, "delta": {"content": "tok%d " % i}, "finish_reason": None}]}
            self.chunk("data: " + json.dumps(ev) + "\n\n")
        ev = {"object": "chat.completion.chunk", "model": "fake-model", "backend": NAME,
              "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
        if timings:
            ev["timings"] = timings
        self.chunk("data: " + json.dumps(ev) + "\n\n")
        options = req.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            ev = {"object": "chat.completion.chunk", "model": "fake-model", "backend": NAME, "choices": [],
                  "usage": usage}
            self.chunk("data: " + json.dumps(ev) + "\n\n")
        self.chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
server.daemon_threads = True
server.serve_forever()
