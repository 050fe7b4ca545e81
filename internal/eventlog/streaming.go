package eventlog

import (
	"bytes"
	"errors"

	"github.com/finalizer-dev/finalizer/progress"
)

// eventPrefix is how every line of a Spark event log starts: Jackson
// writes the "Event" field first.
var eventPrefix = []byte(`{"Event":"`)

// streamingClasses are the simple names of the streaming query listener
// events, as they end the "Event" class name.
var streamingClasses = [][]byte{
	[]byte("QueryStartedEvent"),
	[]byte("QueryProgressEvent"),
	[]byte("QueryIdleEvent"),
	[]byte("QueryTerminatedEvent"),
}

// Streaming parses one line of an event log and keeps it when it is a
// streaming query listener event: it returns the event and true. For a
// blank line and for any other event of the log (job, stage, task,
// application events: progress.ErrIgnored) it returns nil, false and no
// error, cheaply: a line whose leading "Event" field names another class is
// not parsed further. A line in the listener form (no "Event" field) is
// parsed with its kind inferred (see progress.Parse). A line that is not a
// valid event returns an error wrapping progress.ErrMalformed, for the
// caller to count and skip.
func Streaming(line []byte) (*progress.Event, bool, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, false, nil
	}
	if rest, ok := bytes.CutPrefix(line, eventPrefix); ok {
		if end := bytes.IndexByte(rest, '"'); end >= 0 && !isStreamingClass(rest[:end]) {
			return nil, false, nil
		}
	}
	ev, err := progress.Parse(line, progress.KindUnknown)
	switch {
	case err == nil:
		return ev, true, nil
	case errors.Is(err, progress.ErrIgnored):
		return nil, false, nil
	default:
		return nil, false, err
	}
}

// isStreamingClass reports whether an event-log "Event" class names one of
// the streaming query listener events. A class with a backslash (an escape
// the fast path does not decode) is left to progress.Parse.
func isStreamingClass(class []byte) bool {
	if bytes.IndexByte(class, '\\') >= 0 {
		return true
	}
	for _, c := range streamingClasses {
		if bytes.HasSuffix(class, c) {
			return true
		}
	}
	return false
}
