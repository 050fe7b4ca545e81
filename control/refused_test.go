package control

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRefused: what no retry changes (a request this package would not
// send, what PostgreSQL refuses for its content) against what may pass
// when tried again (a lock, the database, a context's end, a
// serialization failure, a cancelled statement). The registry holds a
// table for a feeder join that failed for the second kind only.
func TestRefused(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("join feeder: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("join feeder: %w", ErrInvalidAdvance), true},
		{fmt.Errorf("join feeder: %w", ErrInvalidTable), true},
		{ErrSchemaTooNew, true},
		{pg("22021"), true}, // a NUL byte in a name
		{pg("23505"), true},
		{pg("42501"), true},
		{ErrBusy, false},
		{fmt.Errorf("join feeder: %w: %w", ErrUnavailable, pg("57P01")), false},
		{fmt.Errorf("join feeder: %w", context.DeadlineExceeded), false},
		{ErrNotMigrated, false},
		{pg("40001"), false},
		{pg("57014"), false},
		{fmt.Errorf("something else"), false},
	} {
		if got := Refused(tc.err); got != tc.want {
			t.Errorf("Refused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
