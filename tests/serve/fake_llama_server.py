#!/usr/bin/env python3
"""A recording fake llama-server for tests of `1bit serve`'s child routes.

Appends one JSON line {"pid", "argv", "env"} to the file named by $RECORD, then serves /health,
/v1/models, canned completions (streamed and not), /tokenize, /props and /metrics on --port.
Knobs: FAKE_READY_DELAY_S (health is 503 until then), FAKE_DELAY_MS (time a completion takes).
Its name in replies is its --device value (Vulkan0, ROCm0...), or "cpu".
"""
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGV = sys.argv[1:]
PORT = int(ARGV[ARGV.index("--port") + 1])
NAME = ARGV[ARGV.index("--device") + 1] if "--device" in ARGV else "cpu"
START = time.time()
READY_DELAY = float(os.environ.get("FAKE_READY_DELAY_S", "0"))
DELAY = float(os.environ.get("FAKE_DELAY_MS", "0")) / 1000.0

if os.environ.get("RECORD"):
    with open(os.environ["RECORD"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "argv": ARGV, "env": dict(os.environ)}) + "\n")


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
        if req.get("max_tokens") == -7:  # a canned upstream error, for relaying tests
            return self.reply(400, {"error": {"code": 400, "message": "max_tokens", "type": "invalid_request_error"}})
        if not req.get("stream"):
            time.sleep(DELAY)
            return self.reply(200, {"id": "x", "object": "chat.completion", "model": "fake-model",
                                    "backend": NAME,
                                    "choices": [{"index": 0, "finish_reason": "stop",
                                                 "message": {"role": "assistant", "content": "hello from " + NAME}}]})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n = 5
        for i in range(n):
            time.sleep(DELAY / n)
            ev = {"object": "chat.completion.chunk", "model": "fake-model", "backend": NAME,
                  "choices": [{"index": 0, "delta": {"content": "tok%d " % i}, "finish_reason": None}]}
            self.chunk("data: " + json.dumps(ev) + "\n\n")
        ev = {"object": "chat.completion.chunk", "model": "fake-model", "backend": NAME,
              "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        self.chunk("data: " + json.dumps(ev) + "\n\n")
        self.chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
server.daemon_threads = True
server.serve_forever()
