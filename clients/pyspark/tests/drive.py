#!/usr/bin/env python3
"""Replay listener events through FinalizerListener, as PySpark would call it.

    python3 clients/pyspark/tests/drive.py --url nats://127.0.0.1:4222 \
        [--prefix spark] [--user U --password P | --token T] \
        [--close-timeout 10] [--raw] --events FILE|-

FILE holds one JSON document a line: an event-log line (a Spark event log
works as is; lines of other events are skipped; a progress is converted to
the listener form that PySpark's event.progress.json returns, unless --raw),
a listener-form document (kind inferred), or {"kind": K, "event": {...}}.
Each becomes a stand-in PySpark event passed to the matching callback
(onQueryStarted, onQueryProgress, onQueryIdle, onQueryTerminated); then
close() flushes. Prints the listener's stats as JSON on stdout; exits 0 when
everything was acknowledged by the server, 1 when close timed out, 2 on a
usage or input error.

It needs finalizer_listener (../) and the stand-in pyspark (./stub/) on the
path; it puts them there itself when they are not importable.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for p in (os.path.join(HERE, "stub"), os.path.dirname(HERE), HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import finalizer_listener  # noqa: E402
import sparkevents  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", action="append", required=True, help="NATS URL (repeatable)")
    ap.add_argument("--prefix", default=finalizer_listener.DEFAULT_PREFIX)
    ap.add_argument("--user")
    ap.add_argument("--password")
    ap.add_argument("--token")
    ap.add_argument("--tls-ca-file")
    ap.add_argument("--close-timeout", type=float, default=10.0)
    ap.add_argument("--raw", action="store_true", help="keep event-log progress in the Jackson form")
    ap.add_argument("--events", required=True, help="JSON lines file, or - for stdin")
    args = ap.parse_args(argv)

    kw = {}
    for k in ("user", "password", "token", "tls_ca_file"):
        if getattr(args, k) is not None:
            kw[k] = getattr(args, k)
    listener = finalizer_listener.FinalizerListener(args.url, prefix=args.prefix, **kw)
    callbacks = {
        "started": listener.onQueryStarted,
        "progress": listener.onQueryProgress,
        "idle": listener.onQueryIdle,
        "terminated": listener.onQueryTerminated,
    }
    src = sys.stdin if args.events == "-" else open(args.events, encoding="utf-8")
    sent = 0
    try:
        for n, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                got = sparkevents.from_line(json.loads(line), raw=args.raw)
            except (ValueError, KeyError, TypeError) as e:
                print("drive.py: %s:%d: %s" % (args.events, n, e), file=sys.stderr)
                listener.close(0)
                return 2
            if got is None:
                continue
            kind, event = got
            callbacks[kind](event)
            sent += 1
    finally:
        if src is not sys.stdin:
            src.close()
    ok = listener.close(args.close_timeout)
    stats = listener.stats()
    stats["events"] = sent
    print(json.dumps(stats, sort_keys=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
