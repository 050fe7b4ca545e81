"""A small NATS client for the tests: subscribe, receive, request.

It is deliberately independent of finalizer_listener's publisher so the tests
check the published messages through a second implementation of the protocol
against a real nats-server.
"""

import json
import socket
import ssl
import time
from urllib.parse import unquote, urlsplit


class Client(object):
    def __init__(self, url, user=None, password=None, token=None, tls=None, timeout=10.0):
        parts = urlsplit(url if "://" in url else "nats://" + url)
        self.host, self.port = parts.hostname, parts.port or 4222
        self.tls = tls if tls is not None else (ssl.create_default_context() if parts.scheme == "tls" else None)
        if parts.username and parts.password is None and token is None:
            token = unquote(parts.username)
        self.user, self.password, self.token = user, password, token
        self.timeout = timeout
        self.buf = b""
        self.sid = 0
        self.sock = socket.create_connection((self.host, self.port), timeout=timeout)
        info = self._line()
        assert info.startswith(b"INFO "), info
        self.info = json.loads(info[5:])
        if self.tls is not None or self.info.get("tls_required"):
            ctx = self.tls or ssl.create_default_context()
            self.sock = ctx.wrap_socket(self.sock, server_hostname=self.host)
        opts = {"verbose": False, "pedantic": False, "name": "finalizer-test", "lang": "python-test",
                "version": "0", "protocol": 1, "echo": False}
        if user is not None:
            opts["user"], opts["pass"] = user, password
        elif token is not None:
            opts["auth_token"] = token
        self.sock.sendall(b"CONNECT " + json.dumps(opts).encode() + b"\r\n")
        self.flush()

    def _line(self, deadline=None):
        deadline = deadline or time.monotonic() + self.timeout
        while b"\r\n" not in self.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("no line from the server")
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the server")
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _read(self, n, deadline):
        while len(self.buf) < n + 2:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("no payload from the server")
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the server")
            self.buf += data
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def flush(self):
        """PING and wait for the PONG: everything sent before is processed."""
        self.sock.sendall(b"PING\r\n")
        while True:
            line = self._line()
            if line == b"PONG":
                return
            if line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")

    def subscribe(self, subject):
        self.sid += 1
        self.sock.sendall(b"SUB %s %d\r\n" % (subject.encode(), self.sid))
        self.flush()
        return self.sid

    def next_msg(self, timeout=10.0):
        """Return (subject, payload) of the next message."""
        deadline = time.monotonic() + timeout
        while True:
            line = self._line(deadline)
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            if line.startswith(b"-ERR"):
                raise RuntimeError(line.decode())
            if line.startswith(b"MSG "):
                parts = line.split(b" ")
                n = int(parts[-1])
                return parts[1].decode(), self._read(n, deadline)

    def messages(self, count, timeout=10.0):
        deadline = time.monotonic() + timeout
        return [self.next_msg(max(0.01, deadline - time.monotonic())) for _ in range(count)]

    def request(self, subject, payload, timeout=10.0):
        inbox = "_INBOX.test.%d" % (self.sid + 1)
        sid = self.subscribe(inbox)
        self.sock.sendall(b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), inbox.encode(), len(payload), payload))
        _, data = self.next_msg(timeout)
        self.sock.sendall(b"UNSUB %d\r\n" % sid)
        return data

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def wait_for(predicate, timeout=10.0, interval=0.01, what="condition"):
    """Poll predicate until it returns a true value or timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)
