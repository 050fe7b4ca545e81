// Package listener is the NATS side of finalizer: the JetStream stream that
// retains every run's last events, one subscription per tracked run filtered
// by its runId through the subject, the one-slot Mailbox each subscription
// fills, discovery of new runs for declarative tracking, and the request
// subjects of the track and join commands. It is the only package that
// imports nats.go.
package listener
