"""Stand-in for the client-side listener bus of Spark Connect 4.x
(pyspark/sql/connect/streaming/query.py: StreamingQueryManager,
StreamingQueryListenerBus), written for these tests, not PySpark's code.

It keeps the shape and the failure behaviour the watchdog relies on:

- the manager's addListener/removeListener go to its bus (_sqlb);
- the bus keeps its listeners in the list _listener_bus; the first append
  registers the server-side listener and starts _execution_thread, which
  reads the event stream; removing the last listener asks the server to
  remove its side and joins the thread;
- when reading the stream raises, the handler warns, clears every
  listener and forgets the thread (PySpark 4.x does exactly that);
- when the server ends the stream (it removed its listener after a failed
  send and sent ResultComplete), the loop simply ends: the thread exits and
  the listeners stay in the list.

The "server" is a FakeServer the test drives.
"""

import queue
import threading
import warnings


class FakeServer(object):
    """The server side of the listener stream, driven by a test."""

    _END = object()

    def __init__(self):
        self.registrations = 0
        self.removals = 0
        self.refuse = False  # the next registration fails
        self._streams = []

    def register(self):
        if self.refuse:
            raise ConnectionError("server refused ADD_LISTENER_BUS_LISTENER")
        self.registrations += 1
        q = queue.Queue()
        self._streams.append(q)
        return self._iterate(q)

    def remove(self):
        self.removals += 1
        for q in self._streams:
            q.put(self._END)
        self._streams = []

    def _iterate(self, q):
        while True:
            item = q.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def post(self, event):
        for q in self._streams:
            q.put(event)

    def fail_stream(self, exc=None):
        """The gRPC stream breaks: the client's handler gets an exception."""
        for q in self._streams:
            q.put(exc or ConnectionError("stream reset"))
        self._streams = []

    def end_stream(self):
        """The server removed its listener and completed the stream."""
        for q in self._streams:
            q.put(self._END)
        self._streams = []


class StreamingQueryListenerBus(object):
    def __init__(self, sqm):
        self._sqm = sqm
        self._listener_bus = []
        self._execution_thread = None
        self._lock = threading.Lock()

    def append(self, listener):
        with self._lock:
            self._listener_bus.append(listener)
            if len(self._listener_bus) == 1:
                assert self._execution_thread is None
                try:
                    result_iter = self._sqm._server.register()
                except Exception as e:
                    warnings.warn("Failed to add the listener because of exception: %s" % e)
                    self._listener_bus.remove(listener)
                    return
                self._execution_thread = threading.Thread(target=self._query_event_handler, args=(result_iter,))
                self._execution_thread.daemon = True
                self._execution_thread.start()

    def remove(self, listener):
        with self._lock:
            if listener not in self._listener_bus:
                return
            if len(self._listener_bus) == 1:
                try:
                    self._sqm._server.remove()
                except Exception as e:
                    warnings.warn("Failed to remove the listener because of exception: %s" % e)
                    return
                if self._execution_thread is not None:
                    self._execution_thread.join()
                    self._execution_thread = None
            self._listener_bus.remove(listener)

    def _query_event_handler(self, it):
        try:
            for kind, event in it:
                self.post_to_all(kind, event)
        except Exception as e:
            warnings.warn(
                "StreamingQueryListenerBus Handler thread received exception, all client side "
                "listeners are removed and handler thread is terminated. The error is: %s" % e
            )
            with self._lock:
                self._execution_thread = None
                self._listener_bus.clear()

    def post_to_all(self, kind, event):
        with self._lock:
            listeners = list(self._listener_bus)
        for listener in listeners:
            try:
                getattr(listener, kind)(event)
            except Exception as e:
                warnings.warn("Listener %s threw an exception\n%s" % (listener, e))


class StreamingQueryManager(object):
    def __init__(self, server, active=()):
        self._server = server
        self._sqlb = StreamingQueryListenerBus(self)
        self.active = list(active)

    def addListener(self, listener):
        self._sqlb.append(listener)

    def removeListener(self, listener):
        self._sqlb.remove(listener)


class SparkSession(object):
    """Just enough of a Spark Connect session: its streams."""

    def __init__(self, server, active=()):
        self.streams = StreamingQueryManager(server, active)
