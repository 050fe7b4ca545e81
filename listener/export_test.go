package listener

import "github.com/finalizer-dev/finalizer/progress"

// SetAfterFlush sets a hook that runs in Subscribe between the live
// subscription becoming active and the catch-up from the stream. Set it
// before subscribing.
func SetAfterFlush(l *Listener, f func()) { l.afterFlush = f }

// SetParse replaces the parser, to observe which payloads are parsed. Set
// it before subscribing.
func SetParse(l *Listener, f func([]byte, progress.Kind) (*progress.Event, error)) { l.parse = f }
