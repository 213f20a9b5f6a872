"""A tiny local HTTP stand-in for llama.cpp's /v1/chat/completions, for malformed-output cases."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Stub:
    """Serves one canned behaviour on 127.0.0.1:<free port>: ``content`` streamed in pieces,
    ``finish_reason``, an HTTP ``status``, or a ``delay_s`` before answering; ``piece_delay_s`` between
    streamed pieces (a slow model); ``body``: bytes sent as they are instead of an event stream (a server that does
    not stream). ``disconnected`` is set when a write finds the client gone (it cancelled)."""

    def __init__(self, content: str = "", finish_reason: str = "stop", status: int = 200, delay_s: float = 0.0,
                 events: list[str] | None = None, piece_delay_s: float = 0.0, body: bytes | None = None):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                stub.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                time.sleep(stub.delay_s)
                if stub.status != 200:
                    self.send_response(stub.status)
                    self.end_headers()
                    self.wfile.write(b'{"error": "boom"}')
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain" if stub.body is not None else "text/event-stream")
                self.end_headers()
                if stub.body is not None:
                    self.wfile.write(stub.body)
                    return
                if stub.events is not None:  # raw `data:` payloads, malformed ones included
                    for e in stub.events:
                        self.wfile.write(b"data: " + e.encode() + b"\n\n")
                    return
                pieces = [stub.content[i:i + 4] for i in range(0, len(stub.content), 4)]
                for p in pieces:
                    try:
                        self._event({"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]})
                    except OSError:  # BrokenPipe / ConnectionReset: the client closed the connection
                        stub.disconnected.set()
                        return
                    time.sleep(stub.piece_delay_s)
                self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": stub.finish_reason}],
                             "timings": {"predicted_n": len(pieces)}})
                self.wfile.write(b"data: [DONE]\n\n")

            def _event(self, obj):
                self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                self.wfile.flush()

        self.content, self.finish_reason, self.status, self.delay_s = content, finish_reason, status, delay_s
        self.events, self.piece_delay_s, self.body = events, piece_delay_s, body
        self.disconnected = threading.Event()
        self.requests: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
