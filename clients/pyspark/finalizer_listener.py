"""Publish Spark Structured Streaming listener events to NATS for finalizer.

Usage (classic PySpark 3.4+, or a Spark Connect client)::

    from finalizer_listener import FinalizerListener
    spark.streams.addListener(FinalizerListener("nats://127.0.0.1:4222", prefix="spark"))

Every event of the session's queries goes to ``<prefix>.<kind>.<queryId>.<runId>``
(kind: started, progress, idle, terminated; ids lowercase), the payload being
``event.progress.json`` for a progress and the event's JSON for the others.

The module uses the Python standard library only (3.7+): a minimal NATS
publisher over a socket (INFO, CONNECT, PUB, PING/PONG), reconnecting with
exponential backoff across a list of servers, with optional user/password or
token authentication and TLS. Listener callbacks never do I/O: they put the
event into a bounded queue that one daemon thread publishes. When the queue is
full, the oldest queued progress (or idle) event of the same run is dropped
first, then the oldest of any run; started and terminated events are never
dropped. Within a run, events are published in the order Spark posted them.
Delivery is at least once: a batch is resent after a reconnect unless the
server acknowledged it (PONG after the batch), so a message can arrive twice;
finalizer keeps the newest progress per run, so a duplicate changes nothing.
"""

import atexit
import collections
import json
import logging
import random
import select
import socket
import ssl
import threading
import time
import weakref

try:  # PySpark 3.4+; the module also works (and is tested) without it.
    from pyspark.sql.streaming import StreamingQueryListener as _ListenerBase

    HAVE_PYSPARK = True
except ImportError:  # pragma: no cover - depends on the environment
    _ListenerBase = object
    HAVE_PYSPARK = False

from urllib.parse import unquote, urlsplit

__all__ = [
    "FinalizerListener",
    "ListenerWatchdog",
    "EventQueue",
    "NatsError",
    "payload_for",
    "DEFAULT_PREFIX",
    "DEFAULT_QUEUE_SIZE",
    "DEFAULT_CLOSE_TIMEOUT",
    "HAVE_PYSPARK",
]

__version__ = "0.1.0"

log = logging.getLogger("finalizer_listener")

# Defaults of FinalizerListener's keyword arguments.
DEFAULT_PREFIX = "spark"
DEFAULT_QUEUE_SIZE = 10000
DEFAULT_CLOSE_TIMEOUT = 5.0
DEFAULT_CONNECT_TIMEOUT = 2.0
DEFAULT_FLUSH_TIMEOUT = 5.0
DEFAULT_RECONNECT_WAIT = 0.1
DEFAULT_MAX_RECONNECT_WAIT = 5.0
DEFAULT_TERMINATION_BLOCK = 1.0
DEFAULT_BATCH_SIZE = 256
DEFAULT_PORT = 4222
DEFAULT_NAME = "finalizer-pyspark"
DEFAULT_WATCHDOG_INTERVAL = 30.0
DEFAULT_SILENCE_AFTER = 300.0

KINDS = ("started", "progress", "idle", "terminated")
# Kinds the full queue may drop: a later progress or idle event of the run
# supersedes them. Started and terminated events are never dropped.
DROPPABLE = frozenset(("progress", "idle"))

# How often the idle publisher thread looks at the socket (to answer the
# server's PING) and how often repeated connection failures are logged.
_IDLE_POLL = 1.0
_WARN_EVERY = 60.0


class NatsError(Exception):
    """An error the NATS server reported (-ERR) or a protocol violation."""


# ---------------------------------------------------------------------------
# Servers


class _Server(object):
    """One NATS server URL: nats://[user:pass@|token@]host[:port] or tls://..."""

    __slots__ = ("url", "scheme", "host", "port", "user", "password", "token")

    def __init__(self, url):
        url = url.strip()
        if "://" not in url:
            url = "nats://" + url
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("nats", "tls"):
            raise ValueError("unsupported NATS URL scheme %r in %r (want nats:// or tls://)" % (scheme, url))
        if not parts.hostname:
            raise ValueError("NATS URL %r has no host" % (url,))
        self.scheme = scheme
        self.host = parts.hostname
        self.port = parts.port or DEFAULT_PORT
        self.user = self.password = self.token = None
        if parts.username is not None and parts.password is not None:
            self.user, self.password = unquote(parts.username), unquote(parts.password)
        elif parts.username:
            self.token = unquote(parts.username)
        # The URL without credentials, for logs.
        host = "[%s]" % self.host if ":" in self.host else self.host
        self.url = "%s://%s:%d" % (scheme, host, self.port)

    def __repr__(self):
        return self.url


def _servers(servers):
    if isinstance(servers, (str, bytes)):
        servers = [servers]
    out = []
    for s in servers:
        if isinstance(s, bytes):
            s = s.decode()
        for one in s.split(","):
            if one.strip():
                out.append(_Server(one))
    if not out:
        raise ValueError("no NATS server URL given")
    return out


# ---------------------------------------------------------------------------
# The connection


class _Connection(object):
    """One connection to a NATS server that publishes and flushes.

    It is used by one thread at a time. Every method raises OSError (network)
    or NatsError (the server said -ERR) on failure; the caller then closes it
    and connects again.
    """

    def __init__(self, server, opts):
        self.server = server
        self.opts = opts
        self.sock = None
        self.buf = b""
        self.max_payload = 1024 * 1024
        self.info = {}

    # -- setup

    def connect(self, timeout):
        o = self.opts
        deadline = time.monotonic() + timeout
        sock = socket.create_connection((self.server.host, self.server.port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            want_tls = self.server.scheme == "tls" or o["tls"] is not None
            if want_tls and o["tls_handshake_first"]:
                sock = self._wrap(sock)
            self.sock = sock
            line = self._readline(deadline)
            if not line.startswith(b"INFO "):
                raise NatsError("expected INFO from %s, got %r" % (self.server, line[:80]))
            self.info = json.loads(line[5:].decode("utf-8"))
            self.max_payload = int(self.info.get("max_payload") or self.max_payload)
            if (want_tls or self.info.get("tls_required")) and not isinstance(self.sock, ssl.SSLSocket):
                self.sock = sock = self._wrap(sock)
            connect = {
                "verbose": False,
                "pedantic": False,
                "tls_required": isinstance(self.sock, ssl.SSLSocket),
                "name": o["name"],
                "lang": "python-stdlib",
                "version": __version__,
                "protocol": 1,
                "echo": False,
                "headers": False,
                "no_responders": False,
            }
            user = o["user"] if o["user"] is not None else self.server.user
            password = o["password"] if o["password"] is not None else self.server.password
            token = o["token"] if o["token"] is not None else self.server.token
            if user is not None:
                connect["user"] = user
                connect["pass"] = password or ""
            elif token is not None:
                connect["auth_token"] = token
            self._send(b"CONNECT " + _json_bytes(connect) + b"\r\nPING\r\n", deadline)
            self._await_pong(deadline)
        except BaseException:
            self.close()
            try:
                sock.close()
            except OSError:
                pass
            raise

    def _wrap(self, sock):
        ctx = self.opts["tls"]
        if ctx is None:
            ctx = ssl.create_default_context()
        return ctx.wrap_socket(sock, server_hostname=self.opts["tls_hostname"] or self.server.host)

    # -- I/O

    def _send(self, data, deadline):
        self.sock.settimeout(max(0.001, deadline - time.monotonic()))
        self.sock.sendall(data)

    def _readline(self, deadline):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2 :]
                return line
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("no answer from %s" % (self.server,))
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("connection closed by %s" % (self.server,))
            self.buf += data
            if len(self.buf) > 4 * 1024 * 1024:
                raise NatsError("protocol line too long from %s" % (self.server,))

    def _handle(self, line, deadline):
        """Handle a server line that is not the PONG awaited; return it if it
        is a PONG."""
        if line == b"PONG":
            return True
        if line == b"PING":
            self._send(b"PONG\r\n", deadline)
        elif line.startswith(b"-ERR"):
            msg = line[4:].strip().strip(b"'").decode("utf-8", "replace")
            if "permissions violation" in msg.lower():
                # The server refused one message and keeps the connection.
                log.warning("finalizer_listener: NATS server %s refused a publish: %s", self.server, msg)
            else:
                raise NatsError("NATS server %s: %s" % (self.server, msg))
        elif line.startswith(b"INFO "):
            try:
                self.info = json.loads(line[5:].decode("utf-8"))
            except ValueError:
                pass
        elif line.startswith(b"MSG ") or line.startswith(b"HMSG "):
            raise NatsError("unexpected message from %s" % (self.server,))
        # +OK and anything else: ignored.
        return False

    def _await_pong(self, deadline):
        while True:
            line = self._readline(deadline)
            if self._handle(line, deadline):
                return

    def publish(self, items, timeout):
        """Publish items and wait until the server acknowledged them (the
        PONG that answers a PING sent after them). Items larger than the
        server's max_payload are skipped and returned."""
        deadline = time.monotonic() + timeout
        parts = []
        skipped = []
        for it in items:
            if len(it.payload) > self.max_payload:
                skipped.append(it)
                continue
            parts.append(b"PUB %s %d\r\n" % (it.subject.encode("utf-8"), len(it.payload)))
            parts.append(it.payload)
            parts.append(b"\r\n")
        parts.append(b"PING\r\n")
        self._send(b"".join(parts), deadline)
        self._await_pong(deadline)
        return skipped

    def service(self):
        """Answer what the server sent while the connection was idle (its
        PING). Raises when the server closed the connection."""
        if self.sock is None:
            raise ConnectionError("not connected")
        pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0
        if not pending:
            readable, _, _ = select.select([self.sock], [], [], 0)
            if not readable:
                return
        deadline = time.monotonic() + 1.0
        self.sock.settimeout(1.0)
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed by %s" % (self.server,))
        self.buf += data
        while b"\r\n" in self.buf:
            self._handle(self._readline(deadline), deadline)

    def close(self):
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


def _json_bytes(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# ---------------------------------------------------------------------------
# The queue


class _Item(object):
    __slots__ = ("kind", "run", "subject", "payload")

    def __init__(self, kind, run, subject, payload):
        self.kind = kind
        self.run = run
        self.subject = subject
        self.payload = payload

    def __repr__(self):
        return "<%s %s>" % (self.kind, self.subject)


class EventQueue(object):
    """A bounded FIFO of events waiting to be published.

    put never blocks for a progress or idle event: when the queue is full,
    it drops the oldest queued progress/idle event of the same run, else the
    oldest of any run, else the new event itself. A started or terminated
    event is never dropped: when nothing droppable is queued, put waits up to
    block_timeout for room and then enqueues it beyond the bound.
    """

    def __init__(self, maxsize=DEFAULT_QUEUE_SIZE, block_timeout=DEFAULT_TERMINATION_BLOCK):
        if maxsize < 1:
            raise ValueError("queue size must be at least 1")
        self.maxsize = maxsize
        self.block_timeout = block_timeout
        self._items = collections.deque()
        self._cond = threading.Condition()
        self.dropped = collections.Counter()
        self.overflow = 0
        self._closing = False
        # Queued droppable items per run, so a full queue looks for a victim
        # of the new item's run only when there is one.
        self._droppable = collections.Counter()

    def __len__(self):
        with self._cond:
            return len(self._items)

    def snapshot(self):
        """The queued items, oldest first (for tests and diagnostics)."""
        with self._cond:
            return list(self._items)

    def put(self, item):
        """Queue item; return False if it was dropped."""
        with self._cond:
            if len(self._items) >= self.maxsize and not self._make_room(item.run):
                if item.kind in DROPPABLE:
                    self.dropped[item.kind] += 1
                    return False
                deadline = time.monotonic() + self.block_timeout
                while len(self._items) >= self.maxsize:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self.overflow += 1
                        break
                    self._cond.wait(remaining)
                    if len(self._items) >= self.maxsize and self._make_room(item.run):
                        break
            self._items.append(item)
            if item.kind in DROPPABLE:
                self._droppable[item.run] += 1
            self._cond.notify_all()
            return True

    def _make_room(self, run):
        """Drop the oldest droppable item of run, else of any run. Called
        with the lock held; returns whether an item was dropped."""
        if not self._droppable:
            return False
        same = self._droppable.get(run, 0) > 0
        victim = None
        for i, it in enumerate(self._items):
            if it.kind in DROPPABLE and (not same or it.run == run):
                victim = i
                break
        if victim is None:  # cannot happen while the counts are right
            return False
        dropped = self._items[victim]
        del self._items[victim]
        self._forget(dropped)
        self.dropped[dropped.kind] += 1
        return True

    def _forget(self, it):
        if it.kind in DROPPABLE:
            self._droppable[it.run] -= 1
            if self._droppable[it.run] <= 0:
                del self._droppable[it.run]

    def take(self, n, timeout):
        """Remove and return up to n items, waiting up to timeout for the
        first; [] on timeout or, when empty, once close_wait was called."""
        with self._cond:
            self._cond.wait_for(lambda: self._items or self._closing, timeout)
            out = []
            while self._items and len(out) < n:
                it = self._items.popleft()
                self._forget(it)
                out.append(it)
            if out:
                self._cond.notify_all()
            return out

    def close_wait(self):
        """Make take return at once when the queue is empty."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()


# ---------------------------------------------------------------------------
# Payloads


def _lower_id(value):
    return str(value).strip().lower()


def _attr(obj, name, default=None):
    try:
        return getattr(obj, name)
    except Exception:  # noqa: BLE001 - a property of a foreign object may raise
        return default


def _event_json(obj):
    """The object's own JSON (a str property or method), or None."""
    j = _attr(obj, "json")
    if callable(j):
        j = j()
    if isinstance(j, bytes):
        return j
    if isinstance(j, str):
        return j.encode("utf-8")
    return None


def _str_or_none(v):
    return None if v is None else str(v)


def payload_for(kind, event):
    """Return (queryId, runId, payload bytes) for a listener event of kind."""
    if kind == "progress":
        p = event.progress
        qid, rid = _lower_id(p.id), _lower_id(p.runId)
        body = _event_json(p)
        if body is None:  # not PySpark's StreamingQueryProgress: best effort
            body = _json_bytes(dict(p) if isinstance(p, dict) else vars(p))
        return qid, rid, body
    qid, rid = _lower_id(event.id), _lower_id(event.runId)
    body = _event_json(event)
    if body is not None:
        return qid, rid, body
    doc = collections.OrderedDict([("id", qid), ("runId", rid)])
    if kind == "started":
        doc["name"] = _str_or_none(_attr(event, "name"))
        doc["timestamp"] = _str_or_none(_attr(event, "timestamp"))
        tags = _attr(event, "jobTags")
        if tags is not None:
            doc["jobTags"] = sorted(str(t) for t in tags)
    elif kind == "idle":
        doc["timestamp"] = _str_or_none(_attr(event, "timestamp"))
    elif kind == "terminated":
        doc["exception"] = _str_or_none(_attr(event, "exception"))
        doc["errorClassOnException"] = _str_or_none(_attr(event, "errorClassOnException"))
    return qid, rid, _json_bytes(doc)


def _check_prefix(prefix):
    tokens = prefix.split(".")
    for t in tokens:
        if not t or any(c in t for c in " \t\r\n*>"):
            raise ValueError("invalid subject prefix %r: want one or more NATS tokens without wildcards" % (prefix,))
    return prefix


# ---------------------------------------------------------------------------
# The listener

_LIVE = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def _close_all_at_exit():
    for listener in list(_LIVE):
        try:
            listener.close(listener._config["exit_timeout"])
        except Exception:  # noqa: BLE001 - never fail the interpreter's exit
            pass


atexit.register(_close_all_at_exit)


class FinalizerListener(_ListenerBase):
    """A StreamingQueryListener that publishes every event to NATS.

    servers: a URL ("nats://host:4222", "tls://host:4222",
    "nats://user:pass@host:4222", "nats://token@host:4222"), a
    comma-separated string of URLs, or a list; tried in turn.

    prefix: the first subject token(s), default "spark".

    Keyword arguments (all optional):
      user, password, token: credentials (override those of the URLs);
      tls: an ssl.SSLContext (implies TLS); tls_ca_file, tls_cert_file,
        tls_key_file: build one (also implies TLS); tls_verify=False turns
        certificate checks off; tls_hostname: the name to verify;
        tls_handshake_first: start TLS before the server's INFO (servers
        configured with handshake_first);
      queue_size (10000), termination_block (1.0 s): see EventQueue;
      connect_timeout (2.0 s), flush_timeout (5.0 s): per attempt;
      reconnect_wait (0.1 s) doubling up to max_reconnect_wait (5.0 s),
        with jitter, after every server of the list failed;
      batch_size (256): events per write and acknowledgement;
      name: the connection name the server shows;
      exit_timeout (close timeout at interpreter exit, default 5.0 s).

    Callbacks only queue the event; a daemon thread, started with the first
    event, publishes. close(timeout) flushes what is queued. The listener
    can be pickled (Spark Connect 3.5 runs listeners on the server): only
    its configuration travels.
    """

    def __init__(self, servers, prefix=DEFAULT_PREFIX, **kwargs):
        self._config = _make_config(servers, prefix, kwargs)
        self._init_runtime()

    # -- pickling: configuration only

    def __getstate__(self):
        cfg = dict(self._config)
        cfg["tls"] = None  # SSLContext does not pickle; rebuilt from the files
        return {"_config": cfg}

    def __setstate__(self, state):
        cfg = state["_config"]
        cfg["tls"] = _tls_context(cfg)
        self._config = cfg
        self._init_runtime()

    def _init_runtime(self):
        cfg = self._config
        self._queue = EventQueue(cfg["queue_size"], cfg["termination_block"])
        self._lock = threading.Lock()
        self._thread = None
        self._closing = threading.Event()
        self._stop = threading.Event()
        self._deadline = None
        self._inflight = 0
        self._stats = collections.Counter()
        self._connected = False
        self._last_warning = 0.0
        self._failures = 0
        self._last_event = time.monotonic()
        self._watchdog = None
        with _LIVE_LOCK:
            _LIVE.add(self)

    # -- StreamingQueryListener

    def onQueryStarted(self, event):
        self._on("started", event)

    def onQueryProgress(self, event):
        self._on("progress", event)

    def onQueryIdle(self, event):
        self._on("idle", event)

    def onQueryTerminated(self, event):
        self._on("terminated", event)

    def _on(self, kind, event):
        # Runs on Spark's listener bus thread: no I/O, never raises.
        self._last_event = time.monotonic()
        try:
            if self._closing.is_set():
                self._stats["after_close"] += 1
                return
            qid, rid, payload = payload_for(kind, event)
            subject = "%s.%s.%s.%s" % (self._config["prefix"], kind, qid, rid)
            if self._queue.put(_Item(kind, rid, subject, payload)):
                self._stats["queued"] += 1
            self._ensure_sender()
        except Exception as e:  # noqa: BLE001
            self._stats["callback_errors"] += 1
            log.warning("finalizer_listener: cannot queue a %s event: %r", kind, e)

    # -- public

    def register(self, spark, watchdog=True, interval=DEFAULT_WATCHDOG_INTERVAL, silence_after=DEFAULT_SILENCE_AFTER):
        """Add this listener to spark.streams and, unless watchdog is False,
        start a ListenerWatchdog that adds it back when Spark removes it.
        Returns the watchdog (or None). close() stops it."""
        spark.streams.addListener(self)
        if not watchdog:
            return None
        dog = ListenerWatchdog(spark, self, interval=interval, silence_after=silence_after)
        with self._lock:
            old, self._watchdog = self._watchdog, dog
        if old is not None:
            old.stop()
        dog.start()
        return dog

    def close(self, timeout=DEFAULT_CLOSE_TIMEOUT):
        """Publish what is queued, waiting at most timeout seconds, then stop.

        Returns True when every queued event was acknowledged by the server,
        False when the timeout passed first (the rest is discarded). Safe to
        call more than once; events arriving after close are ignored.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            if self._deadline is None or deadline < self._deadline:
                self._deadline = deadline
            self._closing.set()
            thread = self._thread
            dog, self._watchdog = self._watchdog, None
        if dog is not None:
            dog.stop(max(0.0, deadline - time.monotonic()))
        self._queue.close_wait()
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._stop.set()
        with _LIVE_LOCK:
            _LIVE.discard(self)
        return len(self._queue) == 0 and self._inflight == 0

    def stats(self):
        """Counters: queued, published, dropped (by kind), overflow (events
        queued beyond the bound), reconnects, callback_errors, pending (not
        yet acknowledged), connected."""
        return {
            "queued": self._stats["queued"],
            "published": self._stats["published"],
            "dropped": {k: v for k, v in self._queue.dropped.items()},
            "too_large": self._stats["too_large"],
            "overflow": self._queue.overflow,
            "reconnects": self._stats["reconnects"],
            "callback_errors": self._stats["callback_errors"],
            "after_close": self._stats["after_close"],
            "pending": len(self._queue) + self._inflight,
            "connected": self._connected,
        }

    # -- the sender thread

    def _ensure_sender(self):
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None and not self._closing.is_set():
                t = threading.Thread(target=self._run, name="finalizer-listener-nats", daemon=True)
                self._thread = t
                t.start()

    def _closing_expired(self):
        return self._stop.is_set() or (
            self._closing.is_set() and self._deadline is not None and time.monotonic() >= self._deadline
        )

    def _run(self):
        cfg = self._config
        conn = None
        batch = []
        try:
            while not self._closing_expired():
                if not batch:
                    batch = self._queue.take(cfg["batch_size"], _IDLE_POLL)
                    self._inflight = len(batch)
                    if not batch:
                        if self._closing.is_set():
                            return  # flushed
                        if conn is not None:
                            try:
                                conn.service()
                            except (OSError, NatsError) as e:
                                log.info("finalizer_listener: NATS connection lost while idle: %s", e)
                                conn.close()
                                conn = None
                                self._connected = False
                        continue
                if conn is None:
                    conn = self._connect()
                    if conn is None:
                        return  # closing and out of time
                try:
                    skipped = conn.publish(batch, self._op_timeout(cfg["flush_timeout"]))
                except (OSError, NatsError, ValueError) as e:
                    self._warn("publish to %s failed, reconnecting: %s" % (conn.server, e))
                    conn.close()
                    conn = None
                    self._connected = False
                    self._stats["reconnects"] += 1
                    continue
                for it in skipped:
                    self._stats["too_large"] += 1
                    log.warning(
                        "finalizer_listener: dropped %s: %d bytes exceed the server's max_payload %d",
                        it.subject,
                        len(it.payload),
                        conn.max_payload,
                    )
                self._stats["published"] += len(batch) - len(skipped)
                batch = []
                self._inflight = 0
                self._failures = 0
        except Exception:  # noqa: BLE001 - a bug must not kill silently
            log.exception("finalizer_listener: publisher thread failed")
        finally:
            if conn is not None:
                conn.close()
            self._connected = False

    def _op_timeout(self, t):
        if self._closing.is_set() and self._deadline is not None:
            return max(0.01, min(t, self._deadline - time.monotonic()))
        return t

    def _connect(self):
        """Connect to the next server that answers, backing off after each
        round of failures. Returns None when closing ran out of time."""
        cfg = self._config
        servers = cfg["servers"]
        wait = cfg["reconnect_wait"]
        i = cfg.setdefault("_next_server", 0)
        while not self._closing_expired():
            for _ in range(len(servers)):
                if self._closing_expired():
                    return None
                server = servers[i % len(servers)]
                i += 1
                cfg["_next_server"] = i
                conn = _Connection(server, cfg)
                try:
                    conn.connect(self._op_timeout(cfg["connect_timeout"]))
                except (OSError, NatsError, ValueError) as e:
                    self._failures += 1
                    self._warn("cannot connect to NATS at %s: %s" % (server, e))
                    continue
                if self._failures:
                    log.warning(
                        "finalizer_listener: connected to NATS at %s after %d failed attempts",
                        server,
                        self._failures,
                    )
                self._failures = 0
                self._connected = True
                return conn
            pause = wait * (0.5 + random.random() / 2)
            if self._closing.is_set():
                if self._deadline is not None:
                    pause = min(pause, max(0.0, self._deadline - time.monotonic()))
                self._stop.wait(pause)
            else:
                self._closing.wait(pause)  # close() cuts the pause short
            wait = min(wait * 2, cfg["max_reconnect_wait"])
        return None

    def _warn(self, msg):
        if self._stop.is_set():
            return  # closed: the caller was told through close()'s result
        now = time.monotonic()
        if self._failures <= 1 or now - self._last_warning >= _WARN_EVERY:
            self._last_warning = now
            suffix = " (%d failures in a row)" % self._failures if self._failures > 1 else ""
            log.warning("finalizer_listener: %s%s", msg, suffix)


# ---------------------------------------------------------------------------
# Watchdog


class ListenerWatchdog(object):
    """Notices when Spark dropped a FinalizerListener and adds it back.

    What PySpark lets it see depends on the client:

    - Spark Connect 4.x (the client-side listener bus, spark.streams._sqlb):
      when the event stream from the server fails, PySpark removes *every*
      client-side listener with only a warning; when the server removes its
      side of the listener after a failed send, the stream ends and the
      bus's handler thread exits while the listener still looks
      registered. The watchdog sees both (the listener missing from the
      bus, or the bus's handler thread gone) and registers the listener
      again, counted in stats() and logged as a warning. The second case
      can only be repaired when this listener is the bus's only one (it
      would otherwise have to remove the user's other listeners): then it
      is logged as an error, counted as "unrecoverable", and left alone.
      These are private attributes of PySpark: when they are missing the
      watchdog says so once and watches for silence only.
    - classic PySpark (Py4J): the JVM's listener bus keeps a listener whose
      callbacks fail (it removes one only when interrupted) and offers
      Python no way to ask whether callbacks still arrive; a dead Py4J
      callback server cannot be seen from here. The watchdog says so once
      and watches for silence only.

    In every mode, while the session has active queries and no event reached
    the listener for silence_after seconds, it logs a warning once per
    silence (counted as "silent"); Spark posts a progress or an idle event
    about every 10 s while a query runs. The service's stale-run alert is
    the signal that does not depend on the driver at all.

    check() runs one round; start() runs it every interval seconds on a
    daemon thread until stop() or the listener's close().
    """

    def __init__(self, spark, listener, interval=DEFAULT_WATCHDOG_INTERVAL, silence_after=DEFAULT_SILENCE_AFTER):
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._spark = spark
        self._listener = listener
        self._interval = interval
        self._silence_after = silence_after
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()
        self._stats = collections.Counter()
        self._said_blind = False
        self._silent = False
        self.mode = self._mode()

    def _streams(self):
        return self._spark.streams

    def _bus(self):
        """The Spark Connect client-side listener bus, or None."""
        try:
            bus = getattr(self._streams(), "_sqlb", None)
        except Exception:  # noqa: BLE001
            return None
        if bus is None or not isinstance(getattr(bus, "_listener_bus", None), list):
            return None
        return bus

    def _mode(self):
        if self._bus() is not None:
            return "connect"
        try:
            if getattr(self._streams(), "_jsqm", None) is not None:
                return "classic"
        except Exception:  # noqa: BLE001
            pass
        return "unknown"

    def start(self):
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="finalizer-listener-watchdog", daemon=True)
            self._thread.start()

    def stop(self, timeout=5.0):
        self._stop.set()
        with self._lock:
            t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    def stats(self):
        """Counters: checks, removed (listener missing from the bus),
        stream_ended (the bus's handler thread gone), readded, readd_failures,
        unrecoverable, silent; and the mode (connect, classic, unknown)."""
        out = {k: self._stats[k] for k in ("checks", "removed", "stream_ended", "readded", "readd_failures", "unrecoverable", "silent")}
        out["mode"] = self.mode
        return out

    def _run(self):
        while not self._stop.wait(self._interval):
            if self._listener._closing.is_set():
                return
            try:
                self.check()
            except Exception:  # noqa: BLE001 - a bug must not kill silently
                log.exception("finalizer_listener: watchdog check failed")

    def check(self):
        """One round. Returns what it found: "ok", "readded", "failed" (the
        listener is gone and adding it back failed; retried next round),
        "unrecoverable", or "blind" (PySpark gives no way to look)."""
        self._stats["checks"] += 1
        self._check_silence()
        bus = self._bus()
        if bus is None:
            if not self._said_blind:
                self._said_blind = True
                log.info(
                    "finalizer_listener: watchdog (%s PySpark) cannot see whether the listener is still registered; "
                    "it only warns when active queries are silent for %ss. Alert on the service's stale runs.",
                    self.mode,
                    self._silence_after,
                )
            return "blind"
        listeners = list(bus._listener_bus)
        present = any(x is self._listener for x in listeners)
        thread = getattr(bus, "_execution_thread", None)
        if not present:
            self._stats["removed"] += 1
            log.warning(
                "finalizer_listener: Spark removed the listener (Spark Connect drops every client-side listener "
                "when its event stream fails); adding it back. Events posted meanwhile are lost."
            )
            return self._readd(remove_first=False)
        if thread is None or not thread.is_alive():
            self._stats["stream_ended"] += 1
            if len(listeners) > 1:
                self._stats["unrecoverable"] += 1
                log.error(
                    "finalizer_listener: the Spark Connect listener event stream ended (the server removed its "
                    "listener) and %d other listeners share the bus; re-registering would remove them, so the "
                    "watchdog leaves it: call spark.streams.removeListener and addListener for every listener",
                    len(listeners) - 1,
                )
                return "unrecoverable"
            log.warning(
                "finalizer_listener: the Spark Connect listener event stream ended (the server removed its listener "
                "after a failed send); registering the listener again. Events posted meanwhile are lost."
            )
            return self._readd(remove_first=True)
        return "ok"

    def _readd(self, remove_first):
        streams = self._streams()
        try:
            if remove_first:
                streams.removeListener(self._listener)
                bus = self._bus()
                if bus is not None and any(x is self._listener for x in bus._listener_bus):
                    # PySpark's remove warns and keeps the listener when the
                    # server refuses; adding it now would register it twice.
                    raise RuntimeError("Spark did not remove the listener")
            streams.addListener(self._listener)
        except Exception as e:  # noqa: BLE001
            self._stats["readd_failures"] += 1
            log.error("finalizer_listener: could not register the listener again (retried in %ss): %r", self._interval, e)
            return "failed"
        bus = self._bus()
        if bus is not None and not any(x is self._listener for x in bus._listener_bus):
            # PySpark's append warns and gives up when the server refuses.
            self._stats["readd_failures"] += 1
            log.error("finalizer_listener: Spark did not take the listener back (retried in %ss)", self._interval)
            return "failed"
        self._stats["readded"] += 1
        log.warning("finalizer_listener: listener registered again (%d times so far)", self._stats["readded"])
        return "readded"

    def _check_silence(self):
        if not self._silence_after or self._silence_after <= 0:
            return
        quiet = time.monotonic() - self._listener._last_event
        if quiet < self._silence_after:
            self._silent = False
            return
        try:
            active = len(self._streams().active)
        except Exception:  # noqa: BLE001
            return
        if active and not self._silent:
            self._silent = True
            self._stats["silent"] += 1
            log.warning(
                "finalizer_listener: %d active queries, but no listener event for %.0fs; "
                "Spark may have stopped calling the listener",
                active,
                quiet,
            )


def _tls_context(cfg):
    if cfg.get("tls_ca_file") or cfg.get("tls_cert_file") or cfg.get("tls_verify") is False:
        ctx = ssl.create_default_context(cafile=cfg.get("tls_ca_file"))
        if cfg.get("tls_cert_file"):
            ctx.load_cert_chain(cfg["tls_cert_file"], cfg.get("tls_key_file"))
        if cfg.get("tls_verify") is False:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return None


def _make_config(servers, prefix, kw):
    known = {
        "user": None,
        "password": None,
        "token": None,
        "tls": None,
        "tls_ca_file": None,
        "tls_cert_file": None,
        "tls_key_file": None,
        "tls_verify": True,
        "tls_hostname": None,
        "tls_handshake_first": False,
        "queue_size": DEFAULT_QUEUE_SIZE,
        "termination_block": DEFAULT_TERMINATION_BLOCK,
        "connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        "flush_timeout": DEFAULT_FLUSH_TIMEOUT,
        "reconnect_wait": DEFAULT_RECONNECT_WAIT,
        "max_reconnect_wait": DEFAULT_MAX_RECONNECT_WAIT,
        "batch_size": DEFAULT_BATCH_SIZE,
        "name": DEFAULT_NAME,
        "exit_timeout": DEFAULT_CLOSE_TIMEOUT,
    }
    unknown = set(kw) - set(known)
    if unknown:
        raise TypeError("FinalizerListener: unknown keyword arguments: %s" % ", ".join(sorted(unknown)))
    cfg = dict(known)
    cfg.update(kw)
    if cfg["password"] is not None and cfg["user"] is None:
        raise ValueError("FinalizerListener: password given without user")
    cfg["servers"] = _servers(servers)
    cfg["prefix"] = _check_prefix(prefix)
    if cfg["tls"] is None:
        cfg["tls"] = _tls_context(cfg)
    if cfg["batch_size"] < 1:
        raise ValueError("batch_size must be at least 1")
    return cfg
