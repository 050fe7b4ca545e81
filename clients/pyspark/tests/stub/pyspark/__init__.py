"""A stand-in for the parts of PySpark that finalizer_listener touches.

PySpark cannot be installed where these tests run. This package exposes
pyspark.sql.streaming.StreamingQueryListener and the four listener event
classes with the attributes PySpark 3.4-4.x gives them (ids as uuid.UUID,
progress.json as a str property, errorClassOnException since 3.5, jobTags
since 4.0). It is written for these tests and is not PySpark's code.
"""

STUB = True
__version__ = "0.0.0-stub"
