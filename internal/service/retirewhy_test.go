package service

import (
	"errors"
	"testing"

	"github.com/finalizer-dev/finalizer/control"
)

// TestRetireWhyChecksAndKeepsBy: a retirement over HTTP or NATS ignored
// its by (neither checked nor kept) while the CLI's --by was checked and
// kept in retired_why. RetireWhy checks both as the CLI does and keeps by.
func TestRetireWhyChecksAndKeepsBy(t *testing.T) {
	for _, c := range []struct{ by, reason, want string }{
		{"", "", "retired over HTTP"},
		{"ops", "", "retired over HTTP by ops"},
		{" ops ", " backfill done ", "retired over HTTP by ops: backfill done"},
		{"", "backfill done", "retired over HTTP: backfill done"},
	} {
		if got, err := RetireWhy("HTTP", c.by, c.reason); err != nil || got != c.want {
			t.Errorf("RetireWhy(%q, %q) = %q, %v; want %q", c.by, c.reason, got, err, c.want)
		}
	}
	for _, c := range []struct{ by, reason string }{{"ops\x1b[2J", ""}, {"a\u2028b", "r"}, {"ops", "r\u200b"}} {
		if _, err := RetireWhy("NATS", c.by, c.reason); !errors.Is(err, control.ErrInvalidText) {
			t.Errorf("RetireWhy(%q, %q) = %v, want ErrInvalidText", c.by, c.reason, err)
		}
	}
}
