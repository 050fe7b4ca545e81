"""Stand-in for pyspark.sql.connect (see the package docstring)."""
