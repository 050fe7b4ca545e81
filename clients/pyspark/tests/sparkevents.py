"""Build stand-in listener events, the way PySpark hands them to a listener.

- started/progress/idle/terminated(...): events with Spark-like content.
- from_line(dict): an event from one JSON line in either form Spark writes:
  an event-log (Jackson) line {"Event": "...$QueryProgressEvent", ...}, whose
  progress is converted to the listener (json4s) form PySpark's
  event.progress.json returns; or a listener-form document, its kind inferred
  like finalizer's parser does (batchId: progress; exception or
  errorClassOnException: terminated; name: started; else idle); or a wrapper
  {"kind": K, "event": {...listener form...}}.
"""

import json
import math
import uuid

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryProgress,
)

_RATES = ("inputRowsPerSecond", "processedRowsPerSecond")


def started(qid, rid, name="orders", timestamp="2026-09-28T14:00:00.000Z", jobTags=None):
    return QueryStartedEvent(uuid.UUID(str(qid)), uuid.UUID(str(rid)), name, timestamp, jobTags)


def idle(qid, rid, timestamp="2026-09-28T14:00:10.000Z"):
    return QueryIdleEvent(uuid.UUID(str(qid)), uuid.UUID(str(rid)), timestamp)


def terminated(qid, rid, exception=None, errorClass=None):
    return QueryTerminatedEvent(uuid.UUID(str(qid)), uuid.UUID(str(rid)), exception, errorClass)


def progress_doc(qid, rid, batch, timestamp=None, commit_ts=None, name="orders"):
    """A listener-form progress shaped like StreamingQueryStatusAndProgressSuite
    output: a Kafka-like source with nested offsets, plus a commit_ts offset."""
    timestamp = timestamp or "2026-09-28T14:%02d:%02d.000Z" % (batch // 60 % 60, batch % 60)
    end = {"topic": {"0": 1000 + batch}}
    if commit_ts is not None:
        end["commit_ts"] = commit_ts
    return {
        "id": str(qid),
        "runId": str(rid),
        "name": name,
        "timestamp": timestamp,
        "batchId": batch,
        "batchDuration": 10,
        "numInputRows": 10,
        "inputRowsPerSecond": 10.0,
        "processedRowsPerSecond": 5.0,
        "durationMs": {"triggerExecution": 10},
        "stateOperators": [],
        "sources": [
            {
                "description": "KafkaV2[Subscribe[topic]]",
                "startOffset": None if batch == 0 else {"topic": {"0": 999 + batch}},
                "endOffset": end,
                "latestOffset": end,
                "numInputRows": 10,
                "inputRowsPerSecond": 10.0,
                "processedRowsPerSecond": 5.0,
            }
        ],
        "sink": {"description": "MemorySink", "numOutputRows": 10},
    }


def progress(qid, rid, batch, **kw):
    return QueryProgressEvent(StreamingQueryProgress(progress_doc(qid, rid, batch, **kw)))


def _finite(v):
    if isinstance(v, str) and v in ("NaN", "Infinity", "-Infinity"):
        return None
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


def _offset(v):
    """Jackson writes offsets as strings holding JSON; json4s nests them."""
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def listener_form(p):
    """Convert an event-log (Jackson) progress to the listener (json4s) form:
    offsets nested, NaN/Infinity rates and empty maps left out, top-level row
    counts and rates computed from the sources, json4s's field order."""
    out = {}
    for k in ("id", "runId", "name", "timestamp", "batchId", "batchDuration"):
        if k in p:
            out[k] = p[k]
    sources = []
    for s in p.get("sources") or []:
        src = {"description": s.get("description")}
        for k in ("startOffset", "endOffset", "latestOffset"):
            if k in s:
                src[k] = _offset(s[k])
        src["numInputRows"] = s.get("numInputRows", 0)
        for k in _RATES:
            v = _finite(s.get(k))
            if v is not None:
                src[k] = v
        if s.get("metrics"):
            src["metrics"] = s["metrics"]
        sources.append(src)
    out["numInputRows"] = sum(s.get("numInputRows", 0) for s in sources)
    for k in _RATES:
        vals = [s.get(k) for s in sources]
        if sources and all(v is not None for v in vals):
            out[k] = sum(vals)
    for k in ("durationMs", "eventTime"):
        if p.get(k):
            out[k] = p[k]
    out["stateOperators"] = p.get("stateOperators") or []
    out["sources"] = sources
    if "sink" in p:
        out["sink"] = p["sink"]
    if p.get("observedMetrics"):
        out["observedMetrics"] = p["observedMetrics"]
    return out


_CLASSES = {
    "QueryStartedEvent": "started",
    "QueryProgressEvent": "progress",
    "QueryIdleEvent": "idle",
    "QueryTerminatedEvent": "terminated",
}


def _infer(doc):
    if "batchId" in doc:
        return "progress"
    if "exception" in doc or "errorClassOnException" in doc:
        return "terminated"
    if "name" in doc:
        return "started"
    return "idle"


def from_doc(kind, doc):
    """The stand-in event of kind for a listener-form document."""
    if kind == "progress":
        return QueryProgressEvent(StreamingQueryProgress(doc))
    cls = {"started": QueryStartedEvent, "idle": QueryIdleEvent, "terminated": QueryTerminatedEvent}[kind]
    return cls.fromJson(doc)


def from_line(doc, raw=False):
    """Return (kind, event) for one JSON line, or None for lines of other
    events (SparkListenerJobStart, ...). raw keeps an event-log progress in
    its Jackson form instead of converting it."""
    if "Event" in doc:
        cls = str(doc["Event"]).replace("$", ".").rsplit(".", 1)[-1]
        kind = _CLASSES.get(cls)
        if kind is None:
            return None
        if kind == "progress":
            p = doc["progress"]
            return kind, from_doc(kind, p if raw else listener_form(p))
        return kind, from_doc(kind, doc)
    if "kind" in doc and "event" in doc:
        return doc["kind"], from_doc(doc["kind"], doc["event"])
    kind = _infer(doc)
    return kind, from_doc(kind, doc)
