// Package pyspark holds the PySpark client of finalizer
// (finalizer_listener.py, standard-library Python) and the Go test that
// runs its Python tests against real nats-servers, so that `go test ./...`
// covers it. There is no Go API here.
package pyspark
