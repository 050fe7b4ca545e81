// Package listener is the NATS side of finalizer: the JetStream stream that
// retains every run's last events, one event subscription that routes each
// message by the runId at the end of its subject to the tracked run's
// subscription (ADR 0009), the one-slot Mailbox each run subscription
// fills, discovery of new runs for declarative tracking, and the request
// subjects of the track and join commands. It is the only package that
// imports nats.go.
package listener
