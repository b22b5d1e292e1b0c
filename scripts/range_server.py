#!/usr/bin/env python3
"""A static file server that answers range requests, for tests and benchmarks.

What a public LUMI-O bucket (or nginx) serves: GET and HEAD, `Range: bytes=a-b`
answered with 206 and Content-Range, an ETag (size and mtime) honoured by
If-Match (412 when the file changed), HTTP/1.1 keep-alive. Python's own
http.server answers no ranges, hence this script.

Test switches:
  --latency-ms N     sleep N ms before answering each request (per-request
                     first-byte latency, as object storage has)
  --forbid PREFIX    answer 403 (with an S3-style XML body) for paths under PREFIX
  --presign TOKEN    act as a presigned GET URL does: every request must carry
                     `?...sig=TOKEN` (else 403), and HEAD is refused with 403
                     (the signature covers the method: S3's SignatureDoesNotMatch)
  --drop-validator   answer range GETs (206) without ETag and Last-Modified,
                     which HEAD still sends
  --fail STATUS[:N]  answer the first N requests (every request without :N)
                     with STATUS (say 503), then serve normally
  GET /_control/stall    later requests hang (no answer) until resumed; each counts as held
  GET /_control/stall_next  the next GET alone hangs until resumed; others are answered
  GET /_control/resume   answer again
  GET /_control/stats    {"get": N, "head": N, "bytes": N, "failed": N, "held": N} as JSON
                         (held: requests hanging now)
  GET /_control/reset    zero the counters

Prints "PORT <n>" on stdout once listening (use --port 0 for any free port).
"""

import argparse
import email.utils
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"stall": False, "stall_next": False, "held": 0, "get": 0, "head": 0, "bytes": 0, "failed": 0}
LOCK = threading.Lock()
# Set by /_control/resume: releases a request held by stall_next.
RESUMED = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = "."
    latency = 0.0
    forbid = None
    presign = None
    drop_validator = False
    fail_status = None
    fail_count = None

    def log_message(self, *args):
        pass

    def send_plain(self, code, body=b"", ctype="text/plain", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def control(self, what):
        with LOCK:
            if what == "stall":
                STATE["stall"] = True
            elif what == "stall_next":
                STATE["stall_next"] = True
            elif what == "resume":
                STATE["stall"] = False
                STATE["stall_next"] = False
                RESUMED.set()
            elif what == "reset":
                STATE.update(get=0, head=0, bytes=0, failed=0)
            body = json.dumps({k: STATE[k] for k in ("get", "head", "bytes", "stall", "failed", "held")})
        self.send_plain(200, body.encode(), "application/json")

    def do_HEAD(self):
        self.serve(head=True)

    def do_GET(self):
        if self.path.startswith("/_control/"):
            return self.control(self.path[len("/_control/"):])
        self.serve(head=False)

    def serve(self, head):
        with LOCK:
            hold = not head and STATE["stall_next"]
            if hold:
                STATE["stall_next"] = False
                RESUMED.clear()
                STATE["held"] += 1
        if hold:
            RESUMED.wait()
            with LOCK:
                STATE["held"] -= 1
        if STATE["stall"]:
            with LOCK:
                STATE["held"] += 1
            while STATE["stall"]:
                time.sleep(0.05)
            with LOCK:
                STATE["held"] -= 1
        if self.latency:
            time.sleep(self.latency)
        with LOCK:
            STATE["head" if head else "get"] += 1
            failing = self.fail_status is not None and (
                self.fail_count is None or STATE["failed"] < self.fail_count
            )
            if failing:
                STATE["failed"] += 1
        if failing:
            return self.send_plain(self.fail_status, b"<html><body><h1>Server error</h1></body></html>\n", "text/html")
        path, _, query = self.path.partition("?")
        if self.presign is not None:
            signed = ("sig=" + self.presign) in query.split("&")
            if head or not signed:
                body = b"<?xml version='1.0'?><Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match the signature you provided.</Message></Error>"
                return self.send_plain(403, b"" if head else body, "application/xml")
        if self.forbid and path.startswith(self.forbid):
            body = b"<?xml version='1.0'?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
            return self.send_plain(403, body, "application/xml")
        rel = os.path.normpath(path.lstrip("/"))
        if rel.startswith(".."):
            return self.send_plain(404, b"not found\n")
        full = os.path.join(self.root, rel)
        try:
            f = open(full, "rb")
            st = os.fstat(f.fileno())
        except OSError:
            return self.send_plain(404, b"not found\n")
        with f:
            size = st.st_size
            etag = '"%x-%x"' % (size, st.st_mtime_ns)
            meta = [
                ("ETag", etag),
                ("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True)),
                ("Accept-Ranges", "bytes"),
            ]
            im = self.headers.get("If-Match")
            if im and im.strip() != "*" and etag not in [t.strip() for t in im.split(",")]:
                return self.send_plain(412, b"precondition failed\n", extra=meta)
            start, end, code = 0, size, 200
            rng = self.headers.get("Range")
            if rng:
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
                if not m or (m.group(1) == "" and m.group(2) == ""):
                    return self.send_plain(416, extra=[("Content-Range", "bytes */%d" % size)])
                a, b = m.group(1), m.group(2)
                if a == "":
                    start, end = max(0, size - int(b)), size
                else:
                    start = int(a)
                    end = min(size, int(b) + 1) if b else size
                if start >= size or start >= end:
                    return self.send_plain(416, extra=[("Content-Range", "bytes */%d" % size)])
                code = 206
                if self.drop_validator:
                    meta = [m for m in meta if m[0] not in ("ETag", "Last-Modified")]
                meta.append(("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size)))
            self.send_response(code)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            for k, v in meta:
                self.send_header(k, v)
            self.end_headers()
            if head:
                return
            f.seek(start)
            left = end - start
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)
            with LOCK:
                STATE["bytes"] += end - start - left


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default accept backlog is 5: a client that opens
    # dozens of connections at once (DataLoader workers each fetching the
    # regions a sampler plans) overflows it, and the kernel drops the extra
    # SYNs, which the client's TCP resends after 1, 2, 4, 8 s: stalls of
    # 15 s that no object store's frontend would cause.
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        # A client that hangs up mid-answer (a cancelled or timed-out read)
        # is normal; anything else is a bug in this script and is printed.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--forbid")
    ap.add_argument("--presign")
    ap.add_argument("--drop-validator", action="store_true")
    ap.add_argument("--fail")
    a = ap.parse_args()
    Handler.root = a.root
    Handler.latency = a.latency_ms / 1000.0
    Handler.forbid = a.forbid
    Handler.presign = a.presign
    Handler.drop_validator = a.drop_validator
    if a.fail:
        status, _, count = a.fail.partition(":")
        Handler.fail_status = int(status)
        Handler.fail_count = int(count) if count else None
    srv = Server((a.bind, a.port), Handler)
    print("PORT %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
