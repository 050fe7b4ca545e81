package main

import (
	"context"
	"testing"
	"time"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest/pgcontrol"
)

// controlDB is a fresh, migrated control table for the commands' tests
// (their --postgres-url), with the store that wrote it, closed at cleanup.
func controlDB(t *testing.T) (string, *control.Store) {
	t.Helper()
	s, url := pgcontrol.Store(t)
	return url, s
}

// advanceTo moves table's verdict to until, written by query (a feeder of
// the table) in run.
func advanceTo(t *testing.T, s *control.Store, table, query, name, run string, until time.Time) {
	t.Helper()
	if _, _, err := s.Advance(context.Background(), control.Advance{Table: table, FinalizedUntil: until, EndTime: until,
		QueryID: query, QueryName: name, RunID: run, BatchID: 1}); err != nil {
		t.Fatal(err)
	}
}
