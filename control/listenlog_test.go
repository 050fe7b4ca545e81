package control

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestListenOutageLogsProportionately: through an outage of the LISTEN
// connection (every reconnect refused, 20 tries), the log has one
// warning when it is lost, not one per try, and one INFO line when it is
// back, saying how long it was down and how many tries failed; the
// waiter is released by the re-check after it.
func TestListenOutageLogsProportionately(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	s, url := newStore(t, Options{Logger: zap.New(core)})
	s.lis.minWait, s.lis.maxWait = time.Millisecond, 5*time.Millisecond
	orig := s.lis.connect
	refuse := make(chan int, 1)
	refuse <- 0
	s.lis.connect = func(ctx context.Context) (*pgx.Conn, error) {
		n := <-refuse
		if n > 0 && n <= 20 {
			refuse <- n + 1
			return nil, errors.New("connection refused (test)")
		}
		refuse <- n
		return orig(ctx)
	}

	ch := goWait(t, context.Background(), s, "t", at(15, 0))
	listening(t, s, 1)
	// The next sessions are refused 20 times, then let through.
	<-refuse
	refuse <- 1
	pid := s.lis.backendPID()
	admin := connect(t, url)
	var ok bool
	if err := admin.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	advance(t, s, "t", at(15, 0)) // perhaps announced to nobody
	if r := result(t, ch); r.err != nil || !r.v.FinalizedUntil.Equal(at(15, 0)) {
		t.Fatalf("Wait = %+v, %v", r.v, r.err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for logs.FilterMessage("LISTEN connection back").Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	lost := logs.FilterMessage("LISTEN connection lost; reconnecting").All()
	back := logs.FilterMessage("LISTEN connection back").All()
	if len(lost) != 1 {
		t.Errorf("%d 'lost' warnings through 21 failed tries, want 1", len(lost))
	}
	if len(back) != 1 || back[0].ContextMap()["failed_tries"] != int64(21) {
		t.Fatalf("'back' lines: %v; want one, with 21 failed tries (the lost session and 20 refused)", back)
	}
}
