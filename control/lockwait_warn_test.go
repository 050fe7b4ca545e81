package control

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestBusyWarningsAreRateLimited holds one control row from another
// session while group after group meets it (a burst's statements, then
// each held advance's retries): the log says so once per class and
// interval, not once per group, and each failed advance still carries
// ErrBusy. Before, every group that met the held row logged a WARN: a
// burst of 100,000 tables in groups of 500 against one held row wrote
// 200 lines, and every retry another.
func TestBusyWarningsAreRateLimited(t *testing.T) {
	const wait = 100 * time.Millisecond
	core, logs := observer.New(zapcore.WarnLevel)
	s, url := newStore(t, Options{LockWait: wait, Logger: zap.New(core)})
	ctx := context.Background()
	var as []Advance
	for i := range 10 {
		tb := fmt.Sprintf("w.%02d", i)
		if _, _, err := s.Advance(ctx, Advance{Table: tb, FinalizedUntil: at(12, 0), QueryID: "q"}); err != nil {
			t.Fatal(err)
		}
		as = append(as, Advance{Table: tb, FinalizedUntil: at(13, 0), QueryID: "q"})
	}
	tx := otherTx(t, url)
	if _, err := tx.Exec(ctx, `SELECT * FROM table_finalization WHERE table_name = 'w.03' FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	const groups = 5
	for g := range groups {
		res, err := s.AdvanceBatch(ctx, as)
		if err != nil {
			t.Fatalf("group %d: %v", g, err)
		}
		for i, a := range as {
			if busy := errors.Is(res[i].Err, ErrBusy); busy != (a.Table == "w.03") {
				t.Errorf("group %d, %s: err = %v", g, a.Table, res[i].Err)
			}
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	busy := logs.FilterMessageSnippet("another session holds tables of the control table locked").All()
	if len(busy) != 1 {
		t.Fatalf("%d busy warnings for %d groups meeting one held row, want 1 (rate-limited)", len(busy), groups)
	}
	if f := busy[0].ContextMap(); f["tables"] == nil || f["suppressed"] == nil {
		t.Errorf("the warning lacks the held tables or the held-back count: %v", f)
	}
}
