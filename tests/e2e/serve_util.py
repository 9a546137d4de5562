"""Shared by the Python drivers of `1bit serve` (soak.py, hostile.py, bench/long_prompt.py): a free
port, a server process that is stopped on every path, resident memory. Standard library only."""
import http.client
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


class Serve:
    """`with Serve(binary, model, args) as s:` starts `1bit serve -m MODEL --port P ARGS` (or, with
    `cmd`, any server's command line with {port} in it), waits for /health to say 200 (raising with
    the reason if the server exits or `timeout` passes) and stops it (SIGTERM, then SIGKILL) on
    leaving. `s.port`, `s.proc`."""

    def __init__(self, binary=None, model=None, args=(), timeout=300, quiet=True, cmd=None):
        self.port = free_port()
        if cmd is not None:
            self.cmd = [part.replace("{port}", str(self.port)) for part in cmd]
        else:
            self.cmd = [binary, "serve", "-m", model, "--port", str(self.port)] + list(args)
        self.timeout, self.quiet, self.proc = timeout, quiet, None

    def __enter__(self):
        out = subprocess.DEVNULL if self.quiet else None
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=out)
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}) before it was healthy: {' '.join(self.cmd)}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                ok = c.getresponse().status == 200
                c.close()
                if ok:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the server was not healthy within {self.timeout} s: {' '.join(self.cmd)}")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __exit__(self, *exc):
        self.stop()
        return False
