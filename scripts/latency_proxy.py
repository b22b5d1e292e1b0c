#!/usr/bin/env python3
"""A TCP proxy for HTTP/1.x that adds a fixed latency to every request, and counts them.

For benchmarks of remote images: every client (packfs, s3fs, ratarmount)
talks to the same local S3 server (moto) through this proxy, so they all see the
same injected per-request latency and are all measured by the same instrument.
Stdlib only; `tc netem` is not available on this kernel.

    latency_proxy.py --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT2 \\
                     --latency-ms 5 [--connect-ms 0] [--stats FILE]

How latency is injected: per connection, the first client->server chunk of each
request waits --latency-ms before it is forwarded. "First chunk of a request" is
the first chunk of a new connection, or the first client->server chunk after the
server last sent something (a direction flip: HTTP/1.1 keep-alive sends the next
request only once the previous answer arrived). Later chunks of the same request
(headers split over segments, a PUT body) and the whole answer, however large,
pass without delay. So each request/response round trip costs +L once, like a
network RTT or an object store's first-byte latency; the bandwidth is untouched.
--connect-ms (default 0) adds a further delay to the first request of each new
connection, to model a TCP (or TLS) handshake if wanted.
A client that pipelines several requests in one chunk is delayed (and counted)
once for them.

What is counted (cumulative since start):
  requests          {"GET": n, "HEAD": n, "PUT": n, ...}: one per request line seen at
                    the start of a request ("flips" not starting with a request line,
                    e.g. a body sent after "100 Continue", are counted in
                    "non_request_flips" and delayed like a request)
  bytes_s2c         bytes forwarded server->client (headers included)
  bytes_c2s         bytes forwarded client->server
  body_bytes        {"GET": n, ...}: body bytes of the answers forwarded, per method
                    of the request they answer (Content-Length, chunked, or up to
                    the close; HEAD, 1xx, 204, 304: none)
  targets           {"GET /bucket/key": n, ...}: requests per method and path (query
                    string dropped; at most 10000 distinct, the rest under "other")
  target_bytes      {"GET /bucket/key": n, ...}: body bytes per method and path
  status            {"200": n, "206": n, ...}
  connections       connections accepted; "open": currently open
  delayed_chunks    chunks that waited the latency
A GET with a Range is counted as one GET (status 206).

How to read the counters (your choice):
  * GET http://LISTEN/_proxy/stats on the proxy's own port: answered by the proxy
    itself as JSON (not forwarded, delayed or counted); e.g.
        curl -s http://127.0.0.1:PORT/_proxy/stats
  * --stats FILE: the same JSON written (atomically, via FILE.tmp + rename) on
    SIGUSR1 and at exit (SIGINT/SIGTERM).
Benchmarks take the counters before and after a pass and subtract.

Prints "listening HOST:PORT" on stdout (flushed) once ready; --listen HOST:0
picks a free port.
"""

import argparse
import asyncio
import collections
import json
import os
import re
import signal
import socket
import sys
import time

BUF = 1 << 20  # read size per chunk
REQ_LINE = re.compile(rb"^([A-Z]{3,10}) (\S+) HTTP/1\.[01]\r?$")
STATS_PATHS = (b"/_proxy/stats", b"/_proxy/stats/")

STATS = {
    "started": time.time(),
    "latency_ms": 0.0,
    "connect_ms": 0.0,
    "connections": 0,
    "open": 0,
    "requests": collections.Counter(),
    "non_request_flips": 0,
    "delayed_chunks": 0,
    "bytes_c2s": 0,
    "bytes_s2c": 0,
    "body_bytes": collections.Counter(),
    "targets": collections.Counter(),
    "target_bytes": collections.Counter(),
    "status": collections.Counter(),
    "upstream_errors": 0,
}


def snapshot():
    s = dict(STATS)
    for k in ("requests", "body_bytes", "status", "targets", "target_bytes"):
        s[k] = dict(STATS[k])
    s["requests_total"] = sum(STATS["requests"].values())
    s["now"] = time.time()
    return s


def write_stats(path):
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(snapshot(), f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def tune(writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        except OSError:
            pass
    writer.transport.set_write_buffer_limits(high=4 << 20)


class Conn:
    """State shared by the two directions of one proxied connection."""

    def __init__(self):
        self.last = None  # "c2s" / "s2c": direction of the last forwarded chunk
        self.line = None  # bytes of a request line being assembled (None: not looking)
        self.pending = collections.deque()  # (method, target) of requests awaiting an answer
        self.cur = ("?", "?")  # (method, target) of the answer being forwarded
        self.state = "head"  # head | body | chunk-size | chunk | chunk-end | trailer
        self.buf = b""  # a line being assembled
        self.hdr = []  # lines of the header block being assembled
        self.body_left = 0  # bytes left in the body or chunk (None: up to the close)

    # client -> server: request lines
    def see_request_bytes(self, data):
        if self.line is None:
            return
        self.line += data[: 8192]
        i = self.line.find(b"\n")
        if i < 0 and len(self.line) < 8192:
            return
        first = self.line[: i if i >= 0 else 8192]
        self.line = None
        m = REQ_LINE.match(first)
        if m:
            method = m.group(1).decode()
            path = m.group(2).split(b"?", 1)[0][:300].decode("latin-1")
            target = method + " " + path
            if target not in STATS["targets"] and len(STATS["targets"]) >= 10000:
                target = "other"
            STATS["requests"][method] += 1
            STATS["targets"][target] += 1
            self.pending.append((method, target))
        else:
            STATS["non_request_flips"] += 1

    # server -> client: answers parsed (status line, headers, Content-Length or
    # chunked body, else a body up to the close) to attribute body bytes
    def see_response_bytes(self, data):
        pos, n = 0, len(data)
        while pos < n:
            st = self.state
            if st == "body" or st == "chunk":
                left = self.body_left
                take = n - pos if left is None else min(left, n - pos)
                STATS["body_bytes"][self.cur[0]] += take
                STATS["target_bytes"][self.cur[1]] += take
                pos += take
                if left is not None:
                    self.body_left = left - take
                    if self.body_left == 0:
                        self.state = "head" if st == "body" else "chunk-end"
                continue
            # a line: of the header block, a chunk size, the CRLF after a chunk, a trailer
            i = data.find(b"\n", pos)
            stop = n if i < 0 else i + 1
            self.buf += data[pos:stop]
            pos = stop
            if i < 0:
                if len(self.buf) > 65536:  # not HTTP as expected: the rest is body
                    self.buf, self.state, self.body_left = b"", "body", None
                continue
            line, self.buf = self.buf, b""
            blank = line in (b"\r\n", b"\n")
            if st == "head":
                if not blank:
                    self.hdr.append(line)
                elif self.hdr:
                    self._answer(self.hdr)
                    self.hdr = []
            elif st == "chunk-size":
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    size = 0
                if size > 0:
                    self.state, self.body_left = "chunk", size
                else:
                    self.state = "trailer"
            elif st == "chunk-end":
                self.state = "chunk-size"
            elif st == "trailer" and blank:
                self.state = "head"

    def _answer(self, lines):
        try:
            code = int(lines[0].split()[1])
        except (IndexError, ValueError):
            code = 0
        if 100 <= code < 200:  # interim answer: the final one follows
            return
        STATS["status"][str(code)] += 1
        self.cur = self.pending.popleft() if self.pending else ("?", "?")
        length, chunked = None, False
        for ln in lines[1:]:
            name, _, value = ln.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    pass
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if self.cur[0] == "HEAD" or code in (204, 304):
            self.state = "head"
        elif chunked:
            self.state = "chunk-size"
        elif length is not None:
            self.state, self.body_left = ("body", length) if length > 0 else ("head", 0)
        else:  # no length: the body ends when the server closes
            self.state, self.body_left = "body", None


async def pump(reader, writer, conn, direction, latency):
    """Copy reader -> writer until EOF; half-close writer at EOF."""
    try:
        while True:
            data = await reader.read(BUF)
            if not data:
                break
            if direction == "c2s":
                if conn.last != "c2s":  # a new request: new connection or a flip
                    conn.line = b""
                    if latency > 0:
                        STATS["delayed_chunks"] += 1
                        await asyncio.sleep(latency)
                conn.see_request_bytes(data)
                STATS["bytes_c2s"] += len(data)
            else:
                conn.see_response_bytes(data)
            conn.last = direction
            writer.write(data)
            await writer.drain()
            if direction == "s2c":
                STATS["bytes_s2c"] += len(data)
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError, asyncio.IncompleteReadError):
        writer.transport.abort()


async def serve_stats(writer):
    body = json.dumps(snapshot(), indent=1, sort_keys=True).encode() + b"\n"
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
    )
    await writer.drain()
    writer.close()


TASKS = set()  # strong references: asyncio forgets a handler's task once its client is gone


async def handle(creader, cwriter, upstream, latency, connect_extra):
    task = asyncio.current_task()
    TASKS.add(task)
    STATS["connections"] += 1
    STATS["open"] += 1
    uwriter = None
    try:
        tune(cwriter)
        # Peek at the first chunk: the proxy's own stats path is answered here.
        first = await creader.read(BUF)
        if not first:
            cwriter.close()
            return
        line = first.split(b"\n", 1)[0]
        m = REQ_LINE.match(line)
        if m and m.group(1) == b"GET" and m.group(2) in STATS_PATHS:
            await serve_stats(cwriter)
            return
        try:
            ureader, uwriter = await asyncio.open_connection(
                upstream[0], upstream[1], limit=BUF
            )
        except OSError as e:
            STATS["upstream_errors"] += 1
            print("upstream %s:%d: %s" % (upstream[0], upstream[1], e), file=sys.stderr)
            cwriter.transport.abort()
            return
        tune(uwriter)
        conn = Conn()
        # The first chunk: a new request (delayed, counted) like any other.
        conn.line = b""
        delay = latency + connect_extra
        if delay > 0:
            STATS["delayed_chunks"] += 1
            await asyncio.sleep(delay)
        conn.see_request_bytes(first)
        STATS["bytes_c2s"] += len(first)
        conn.last = "c2s"
        uwriter.write(first)
        await uwriter.drain()
        await asyncio.gather(
            pump(creader, uwriter, conn, "c2s", latency),
            pump(ureader, cwriter, conn, "s2c", latency),
        )
    except (ConnectionError, OSError):
        pass
    finally:
        TASKS.discard(task)
        STATS["open"] -= 1
        for w in (cwriter, uwriter):
            if w is not None:
                try:
                    w.close()
                except Exception:
                    pass


def hostport(s):
    host, _, port = s.rpartition(":")
    return host or "127.0.0.1", int(port)


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT to listen on (PORT 0: any)")
    ap.add_argument("--upstream", required=True, help="HOST:PORT of the HTTP server")
    ap.add_argument("--latency-ms", type=float, default=5.0, help="added once per request")
    ap.add_argument("--connect-ms", type=float, default=0.0,
                    help="added once more to a new connection's first request")
    ap.add_argument("--stats", help="write counters as JSON here on SIGUSR1 and at exit")
    a = ap.parse_args()
    latency = a.latency_ms / 1000.0
    STATS["latency_ms"] = a.latency_ms
    STATS["connect_ms"] = a.connect_ms
    up = hostport(a.upstream)
    lh, lp = hostport(a.listen)
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, up, latency, a.connect_ms / 1000.0),
        lh, lp, limit=BUF, backlog=1024, reuse_address=True,
    )
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGUSR1, write_stats, a.stats)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    port = server.sockets[0].getsockname()[1]
    print("listening %s:%d" % (lh, port), flush=True)
    async with server:
        await stop
    write_stats(a.stats)


if __name__ == "__main__":
    asyncio.run(main())
