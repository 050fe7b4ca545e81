// Package bench is the load generator and measurement harness behind
// `finalizer bench` (BENCHMARKS.md). It runs the service's own parts
// in-process, wired as `finalizer serve` wires them (control store,
// listener with its JetStream stream, registry with rules, discovery,
// recovery), against an embedded nats-server and a real PostgreSQL, and
// drives N simulated streaming query runs that publish realistic progress
// documents (2-3 KB; CDC sources with endOffset.commit_ts and Kafka
// sources with a watermark; the listener and the event-log JSON forms)
// whose synthetic event times cross minute boundaries.
//
// It measures, in one process and one invocation: the raw NATS delivery
// rate of the ingest messages to a subscriber that does nothing and the
// service's ingest rate of the same messages; the latency from publishing
// a period-crossing progress to the committed verdict, heard through
// LISTEN/NOTIFY like a downstream job, under a background load; control
// writes per (table, period); the top-of-period burst of N tables; resident
// memory per tracked run; recovery of N runs after a restart; and the same
// figures for a naive baseline (one upsert per progress event).
//
// Like tests/, it plays the Spark drivers and the downstream jobs, so it
// talks to NATS and PostgreSQL directly (nats.go, pgx) besides the
// service's own packages.
package bench
