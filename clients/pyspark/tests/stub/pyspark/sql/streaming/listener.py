"""Stand-in for pyspark.sql.streaming.listener (see the package docstring).

The classes keep the public surface of PySpark's: the same names, the same
attributes and types. Each event class has fromJson(dict) taking the
listener (json4s) form of the event, as Spark Connect clients build them.
"""

import abc
import json
import uuid


class StreamingQueryListener(abc.ABC):
    """Interface for listening to streaming query events."""

    @abc.abstractmethod
    def onQueryStarted(self, event):
        pass

    @abc.abstractmethod
    def onQueryProgress(self, event):
        pass

    # Not abstract in PySpark either: added in 3.5 without breaking older
    # listeners.
    def onQueryIdle(self, event):
        pass

    @abc.abstractmethod
    def onQueryTerminated(self, event):
        pass


class QueryStartedEvent(object):
    def __init__(self, id, runId, name, timestamp, jobTags=None):
        self._id = id
        self._runId = runId
        self._name = name
        self._timestamp = timestamp
        self._jobTags = set(jobTags or ())

    @classmethod
    def fromJson(cls, j):
        return cls(uuid.UUID(j["id"]), uuid.UUID(j["runId"]), j.get("name"), j.get("timestamp"), j.get("jobTags"))

    id = property(lambda self: self._id)
    runId = property(lambda self: self._runId)
    name = property(lambda self: self._name)
    timestamp = property(lambda self: self._timestamp)
    jobTags = property(lambda self: self._jobTags)


class QueryIdleEvent(object):
    def __init__(self, id, runId, timestamp):
        self._id = id
        self._runId = runId
        self._timestamp = timestamp

    @classmethod
    def fromJson(cls, j):
        return cls(uuid.UUID(j["id"]), uuid.UUID(j["runId"]), j.get("timestamp"))

    id = property(lambda self: self._id)
    runId = property(lambda self: self._runId)
    timestamp = property(lambda self: self._timestamp)


class QueryTerminatedEvent(object):
    def __init__(self, id, runId, exception, errorClassOnException=None):
        self._id = id
        self._runId = runId
        self._exception = exception
        self._errorClassOnException = errorClassOnException

    @classmethod
    def fromJson(cls, j):
        return cls(
            uuid.UUID(j["id"]), uuid.UUID(j["runId"]), j.get("exception"), j.get("errorClassOnException")
        )

    id = property(lambda self: self._id)
    runId = property(lambda self: self._runId)
    exception = property(lambda self: self._exception)
    errorClassOnException = property(lambda self: self._errorClassOnException)


class StreamingQueryProgress(dict):
    """A progress: a dict of the listener-form fields (PySpark 4 made it a
    dict subclass) with attribute access, ids as uuid.UUID, and json."""

    def __init__(self, jdict):
        super(StreamingQueryProgress, self).__init__(jdict)
        self._jdict = jdict

    @classmethod
    def fromJson(cls, j):
        return cls(j)

    @property
    def id(self):
        return uuid.UUID(self._jdict["id"])

    @property
    def runId(self):
        return uuid.UUID(self._jdict["runId"])

    @property
    def name(self):
        return self._jdict.get("name")

    @property
    def timestamp(self):
        return self._jdict.get("timestamp")

    @property
    def batchId(self):
        return self._jdict["batchId"]

    @property
    def json(self):
        """The compact JSON of this progress (Spark Connect clients build it
        with json.dumps of the dict they received)."""
        return json.dumps(self._jdict)

    @property
    def prettyJson(self):
        return json.dumps(self._jdict, indent=4)


class QueryProgressEvent(object):
    def __init__(self, progress):
        self._progress = progress

    @classmethod
    def fromJson(cls, j):
        return cls(StreamingQueryProgress.fromJson(j["progress"]))

    progress = property(lambda self: self._progress)
