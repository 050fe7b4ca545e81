package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/embeddednats"
	"github.com/finalizer-dev/finalizer/internal/pgcluster/pgtest"
	"github.com/finalizer-dev/finalizer/progress"
)

// EnvScaleRuns sets the number of runs of TestScaleRuns. Unset, the test
// tracks defaultScaleRuns (about 15 s on an idle two-core machine);
// `FINALIZER_SCALE_RUNS=100000 go test -run TestScaleRuns ./internal/bench`
// is the full size of issue 12.
const EnvScaleRuns = "FINALIZER_SCALE_RUNS"

const defaultScaleRuns = 10_000

func scaleRuns(t *testing.T) int {
	v := os.Getenv(EnvScaleRuns)
	if v == "" {
		return defaultScaleRuns
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		t.Fatalf("%s=%q: want a number of runs, at least 2", EnvScaleRuns, v)
	}
	return n
}

// countingCore counts the log entries at INFO and above, by level, and
// writes nothing: the test checks that the logs stay proportionate at
// scale (nothing at INFO per run or per verdict move).
type countingCore struct {
	zapcore.LevelEnabler
	info, warn, errs *atomic.Int64
}

func (c countingCore) With([]zapcore.Field) zapcore.Core { return c }
func (c countingCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}
func (c countingCore) Write(e zapcore.Entry, _ []zapcore.Field) error {
	switch {
	case e.Level >= zapcore.ErrorLevel:
		c.errs.Add(1)
	case e.Level == zapcore.WarnLevel:
		c.warn.Add(1)
	default:
		c.info.Add(1)
	}
	return nil
}
func (countingCore) Sync() error { return nil }

// TestScaleRuns tracks N runs (issue 12: 100,000) in one process against
// the real PostgreSQL and an embedded NATS server, with small progress
// documents: half of them explicitly (persisted, as `finalizer track`
// does), half found by a rule from their first progress. It checks that
// every run is tracked, that every run's verdict lands in the control
// table, that nothing is dropped (no slow consumer), and that the log
// holds no line per run or per verdict at INFO.
func TestScaleRuns(t *testing.T) {
	n := scaleRuns(t)
	// About 150 runs tracked per second on a loaded 2-core machine: the
	// bound grows with N, and ends 30 s before go test's -timeout when
	// that comes first, so that the failure says what was not done
	// instead of go test's panic.
	bound := max(15*time.Minute, time.Duration(n)*30*time.Millisecond)
	if d, ok := t.Deadline(); ok {
		bound = min(bound, time.Until(d)-30*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	began := time.Now()
	work := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Options{Port: embeddednats.RandomPort, StoreDir: filepath.Join(work, "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	pgURL := pgtest.URL(t)

	tag := fmt.Sprintf("%08x", time.Now().UnixNano()&0xffffffff)
	spec, err := progress.ParseSpec(progress.SpecOptions{Time: "offset:/commit_ts", Granularity: "minute"})
	if err != nil {
		t.Fatal(err)
	}
	var info, warn, errs atomic.Int64
	logger := zap.New(countingCore{LevelEnabler: zapcore.InfoLevel, info: &info, warn: &warn, errs: &errs})
	runtime.GC()
	rss0 := residentBytes()
	svc, err := startService(ctx, serviceConfig{
		NATSURL: srv.ClientURL(), PostgresURL: pgURL, ControlTable: "scale.table_finalization", Prefix: prefix,
		Rules:  []finalizer.Rule{{Table: "scale.{name}", Query: "r" + tag + "-*", Spec: spec}},
		Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.stop(context.Background())
	pub, err := nats.Connect(srv.ClientURL(), nats.Name("scale-publisher"))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	// Run i: explicit when even, by the rule when odd. Its one progress
	// carries a commit time in the past, so its verdict is that minute.
	at := time.Now().Add(-48 * time.Hour).Truncate(time.Minute).Add(30 * time.Second)
	want := at.Truncate(time.Minute)
	type run struct{ q, r, name, table string }
	runs := make([]run, n)
	for i := range runs {
		q := fmt.Sprintf("%s-0000-4000-8000-%012x", tag, i)
		r := fmt.Sprintf("%s-0001-4000-8000-%012x", tag, i)
		name := fmt.Sprintf("r%s-%d", tag, i)
		table := "scale.e" + strconv.Itoa(i)
		if i%2 == 1 {
			table = "scale." + name
		}
		runs[i] = run{q, r, name, table}
	}
	tracked := func() int64 { return int64(svc.metric("finalizer_tracked_runs")) }
	start := time.Now()
	var (
		wg    sync.WaitGroup
		first atomic.Pointer[error]
	)
	work2 := make(chan run, 64)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range work2 {
				if _, err := svc.tracker.Track(ctx, finalizer.Request{QueryID: x.q, RunID: x.r, Table: x.table, Spec: spec, Explicit: true}); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	for i := 0; i < n; i += 2 {
		work2 <- runs[i]
	}
	close(work2)
	wg.Wait()
	if p := first.Load(); p != nil {
		t.Fatalf("track: %v", *p)
	}
	t.Logf("%d runs tracked explicitly in %s", (n+1)/2, time.Since(start).Round(time.Millisecond))

	// Every run posts one small progress; the rule's runs are found by it.
	// The publisher stays within 5,000 undecided runs of discovery.
	publishedAt := time.Now()
	var buf []byte
	ts := at.UTC().Format("2006-01-02T15:04:05.000")
	for i, x := range runs {
		if i%2 == 1 {
			for int64(i/2)-(tracked()-int64((n+1)/2)) > 5000 {
				if ctx.Err() != nil {
					t.Fatal(ctx.Err())
				}
				time.Sleep(time.Millisecond)
			}
		}
		buf = fmt.Appendf(buf[:0], `{"id":%q,"runId":%q,"name":%q,"timestamp":"%sZ","batchId":1,`+
			`"sources":[{"description":"cdc","startOffset":null,"endOffset":{"commit_ts":%q}}],"eventTime":{}}`,
			x.q, x.r, x.name, ts, ts)
		if err := pub.Publish(prefix+".progress."+x.q+"."+x.r, buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "every run tracked", func() (bool, string) {
		c := tracked()
		return c == int64(n), fmt.Sprintf("%d of %d tracked", c, n)
	})
	trackedIn := time.Since(start)

	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	waitFor(ctx, t, "every verdict", func() (bool, string) {
		var c int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM scale.table_finalization WHERE finalized_until = $1`, want).Scan(&c); err != nil {
			return false, err.Error()
		}
		return c == int64(n), fmt.Sprintf("%d of %d verdicts at %s", c, n, want.Format(time.RFC3339))
	})
	landed := time.Since(publishedAt)
	rss := residentBytes()
	perRun := (float64(rss) - float64(rss0)) / float64(n) / 1024
	t.Logf("%d runs: all tracked %s after the start, all %d verdicts %s after the first publication; RSS %.1f KiB per run (no forced GC)",
		n, trackedIn.Round(time.Millisecond), n, landed.Round(time.Millisecond), perRun)
	// The bench measures issue 12's target (RSS < 8 KiB per run at
	// 100,000: 7.0-7.9 there); this bound is looser, for a shared
	// machine, and still catches a regression such as a goroutine per
	// run (its 8 KiB stack alone). Below 100,000 runs the process's
	// fixed cost (the memory limit's floor) dominates and nothing is
	// asserted.
	if n >= 100_000 && perRun > 12 {
		t.Errorf("RSS %.1f KiB per run at %d runs: want under 12 (the bench's figure is 7.0-7.9)", perRun, n)
	}

	var other int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM scale.table_finalization WHERE finalized_until <> $1`, want).Scan(&other); err != nil {
		t.Fatal(err)
	}
	if other != 0 {
		t.Errorf("%d tables have a verdict other than %s", other, want)
	}
	if d := svc.dropped(); d != 0 {
		t.Errorf("the service dropped %d events", d)
	}
	if sc := svc.metric("finalizer_nats_slow_consumer_total"); sc != 0 {
		t.Errorf("%v slow-consumer events", sc)
	}
	// Proportionate logs: at most ten lines per kind and 10 s (ADR 0022)
	// and a line saying how many were held back, not one per run or per
	// verdict (which made two per run). The bound follows the test's
	// length, not N: sampledKinds is more than the kinds of INFO line a
	// run's tracking and verdicts log, and 100 lines cover the start and
	// the stop. A line per 10 runs (1,000 at the CI's 10,000 runs)
	// exceeds it.
	const sampledKinds = 6
	tens := int64(time.Since(began)/(10*time.Second)) + 1
	t.Logf("log lines: %d info, %d warn, %d error in %s", info.Load(), warn.Load(), errs.Load(), time.Since(began).Round(time.Second))
	if i, most := info.Load(), 100+11*sampledKinds*tens; i > most {
		t.Errorf("%d INFO lines for %d runs in %s (at most %d): the log holds a line per run or per verdict", i, n, time.Since(began).Round(time.Second), most)
	}
	if e := errs.Load(); e != 0 {
		t.Errorf("%d ERROR lines", e)
	}
}

// waitFor polls cond every 100 ms until it holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, state := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %s", what, state)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
