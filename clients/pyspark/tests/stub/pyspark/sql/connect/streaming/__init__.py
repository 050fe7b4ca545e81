"""Stand-in for pyspark.sql.connect.streaming (see the package docstring)."""
