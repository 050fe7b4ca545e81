package progress

import "errors"

// The sentinel errors of Parse. Returned errors wrap one of them with
// context; test with errors.Is.
var (
	// ErrMalformed means the payload is not an event Parse can trust: it is
	// not JSON, or an id is missing or not a UUID, or a field has the wrong
	// type, or a progress lacks its batchId. A caller counts and drops it.
	ErrMalformed = errors.New("malformed event")

	// ErrIgnored means the payload is a well-formed event-log line of
	// another Event class (SparkListenerLogStart, job and stage events,
	// ...). A caller reading an event log skips it silently.
	ErrIgnored = errors.New("not a streaming query event")

	// ErrKindMismatch means the kind the caller expected (from the NATS
	// subject) differs from the kind the event-log form names in its
	// "Event" field.
	ErrKindMismatch = errors.New("event kind mismatch")
)
