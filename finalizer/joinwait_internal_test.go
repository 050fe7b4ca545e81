package finalizer

import (
	"testing"
	"time"
)

// HeldBy is the one wording of a join wait the CLI, the HTTP API and the
// status page show: a UUID query id shortened, a name-like one whole.
func TestJoinWaitHeldBy(t *testing.T) {
	at := time.Date(2026, 9, 28, 14, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		w    JoinWait
		want string
	}{
		{JoinWait{QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028", QueryName: "region-eu", RunID: "0b7e5a52-9c1d-4e2f-a3b4-c5d6e7f8a9b0",
			Since: at, LastError: "join feeder: postgresql unavailable"},
			"held until query region-eu (run 0b7e5a52) joins its feeders (waiting since 2026-09-28T14:30:00Z; retried: join feeder: postgresql unavailable)"},
		{JoinWait{QueryID: "0b0b0b0b-bc9c-4be8-97a9-b135d2943028", Since: at},
			"held until query 0b0b0b0b joins its feeders (waiting since 2026-09-28T14:30:00Z; retried)"},
		{JoinWait{QueryID: "nightly-backfill-query", Since: at.In(time.FixedZone("x", 3600))},
			"held until query nightly-backfill-query joins its feeders (waiting since 2026-09-28T14:30:00Z; retried)"},
	} {
		if got := c.w.HeldBy(); got != c.want {
			t.Errorf("HeldBy = %q, want %q", got, c.want)
		}
	}
}
