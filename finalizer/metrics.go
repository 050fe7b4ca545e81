package finalizer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/finalizer-dev/finalizer/progress"
)

// Metrics are the Prometheus collectors of the finalization engine. The
// zero value is not usable; call NewMetrics. All methods are safe for
// concurrent use.
type Metrics struct {
	// Events counts listener events by kind and outcome (accepted,
	// malformed, mismatch, ignored, superseded) as the trackers' run
	// subscriptions handle them: once per tracker of the run. Discovery's
	// started events are not counted; bad messages of runs not tracked yet
	// are, once.
	Events *prometheus.CounterVec
	// Candidates counts what trackers did with a progress: advanced (the
	// verdict moved), unchanged (written, another writer was ahead),
	// same_period (no write needed), clamped (a time ahead of the clock:
	// the candidate stopped at the period the clock is in), and the
	// outcomes that give no candidate: no_time, implausible, not_executed,
	// watermark_unbounded, not_caught_up (progress.Outcome) and future (a
	// time beyond the clock plus the skew allowance).
	Candidates *prometheus.CounterVec
	// HeldRuns is the number of live trackers whose newest progress gave
	// no candidate, by guard (the outcome).
	HeldRuns *prometheus.GaugeVec
	// QuietAdvances counts verdict moves made because a source was quiet
	// (ADR 0014), by signal: idle_event, no_data_progress, caught_up.
	QuietAdvances *prometheus.CounterVec
	// Advances counts verdict moves.
	Advances prometheus.Counter
	// Writes counts control-table statements that succeeded.
	Writes prometheus.Counter
	// FailedAdvances counts advances that still failed after their retries.
	FailedAdvances prometheus.Counter
	// Retries counts retries of a failed advance (the 1 s and 2 s ones).
	Retries prometheus.Counter
	// TrackedRuns is the number of live trackers.
	TrackedRuns prometheus.Gauge
	// StaleRuns is the number of live trackers whose run has been silent for
	// longer than the stale threshold.
	StaleRuns prometheus.Gauge
	// JoinWaitingTables is the number of tables that wait for a new
	// feeder's join that did not succeed and is retried
	// (Registry.JoinWaits): they do not move meanwhile.
	JoinWaitingTables prometheus.Gauge
	// AdvanceSeconds is the latency of one advance statement.
	AdvanceSeconds prometheus.Histogram
	// AdvanceBatchSize is the number of advances each group commit applied
	// in one statement (ADR 0008).
	AdvanceBatchSize prometheus.Histogram
	// Reasserts counts re-asserts of a tracker's last written verdict
	// after the control database's LISTEN connection was re-established
	// (a failover), by outcome: restored (the verdict had been lost and was
	// written again), unchanged (it was there), failed.
	Reasserts *prometheus.CounterVec
	// Refused counts runs the registry refused to track, by reason
	// (RefusedTableName, RefusedQueryName, RefusedRunCap).
	// HistorySigns counts signs that a table's history changed under its
	// verdict, by kind (SignReset, SignBehind, SignSourceChanged).
	HistorySigns *prometheus.CounterVec
	// Rewinds counts the operator rewinds the service heard of.
	Rewinds prometheus.Counter
	Refused *prometheus.CounterVec

	// The children of Events, Candidates and QuietAdvances already
	// looked up, by label values: a lookup hashes the values and takes
	// the vector's lock, and the hot path counts every event (issue 12).
	events     [progress.KindTerminated + 1]sync.Map // outcome -> prometheus.Counter, by kind
	candidates sync.Map                              // outcome -> prometheus.Counter
	quiet      sync.Map                              // signal -> prometheus.Counter

	now func() time.Time
	mu  sync.Mutex
	// tables holds the per-table figures, exported at scrape time by
	// tableCollector: a map entry per table instead of a labelled
	// collector per table and figure, which cost about 450 bytes of heap
	// per tracked table (issue 12).
	tables map[string]*tableFigures
	// figures is the unused rest of the last block of tableFigures: the
	// per-table figures are made figuresBlock at a time, not one heap
	// object per table for the collector to mark (issue 12). A table's
	// figures are never dropped, so no block is ever partly free.
	figures     []tableFigures
	lagDesc     *prometheus.Desc
	tsDesc      *prometheus.Desc
	missingDesc *prometheus.Desc
	droppedDesc *prometheus.Desc
}

// figuresBlock is how many tables' figures Metrics makes at once (4 KiB).
const figuresBlock = 128

// tableFigures are one table's figures in Metrics.
type tableFigures struct {
	// until is the table's verdict (the lag gauges); zero when none was
	// observed yet. Guarded by Metrics.mu.
	until time.Time
	// known is when the figures were made (a tracker started into the
	// table, or its verdict was read): the table is shown without a
	// verdict since then (finalizer_verdict_missing_seconds).
	known time.Time
	// dropped counts the rows Spark's stateful operators dropped as later
	// than the watermark, in the progresses the trackers parsed
	// (finalizer_rows_dropped_by_watermark_total). A tracker keeps it
	// (droppedRows) and adds to it without a lookup.
	dropped atomic.Int64
}

// NewMetrics returns the engine's collectors, registered with prom (a
// Prometheus registry) when it is not nil. now is the clock used for the
// verdict lag (nil = time.Now).
func NewMetrics(prom prometheus.Registerer, now func() time.Time) *Metrics {
	if now == nil {
		now = time.Now
	}
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "finalizer_events_total",
			Help: "Listener events handled by trackers, by kind and outcome: once per tracker of the event's run (a run tracked into two tables counts twice); a started event that only makes discovery track a run is not counted; a bad message of a run not tracked yet is counted once.",
		}, []string{"kind", "outcome"}),
		Candidates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "finalizer_candidates_total",
			Help: "Progress events evaluated by trackers, by outcome.",
		}, []string{"outcome"}),
		HeldRuns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "finalizer_held_runs",
			Help: "Trackers whose newest progress gave no candidate, by guard.",
		}, []string{"guard"}),
		QuietAdvances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "finalizer_quiet_advances_total",
			Help: "Verdict moves made because the source was quiet (quiet.after), by signal.",
		}, []string{"signal"}),
		Advances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "finalizer_advances_total",
			Help: "Verdict moves written to the control table.",
		}),
		Writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "finalizer_control_writes_total",
			Help: "Advance statements executed successfully (moved or not).",
		}),
		FailedAdvances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "finalizer_advance_failures_total",
			Help: "Advances that failed after their retries (retried again on the run's next event).",
		}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "finalizer_advance_retries_total",
			Help: "Retries of a failed advance.",
		}),
		TrackedRuns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "finalizer_tracked_runs",
			Help: "Trackers currently running (one per run and table).",
		}),
		StaleRuns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "finalizer_stale_runs",
			Help: "Trackers whose run has sent no event for longer than the stale threshold.",
		}),
		JoinWaitingTables: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "finalizer_join_waiting_tables",
			Help: "Tables that do not move because a new feeder's join to them did not succeed (another session holds the table locked, the database is unavailable) and is retried; finalizer status says which query waits and why.",
		}),
		AdvanceSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "finalizer_advance_seconds",
			Help:    "Latency of one advance statement.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		AdvanceBatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "finalizer_advance_batch_size",
			Help:    "Advances applied by one group-commit statement.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 7),
		}),
		Reasserts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "finalizer_reasserts_total",
			Help: "Re-asserts of a tracker's last written verdict after a reconnect to the control database, by outcome: restored (it had been lost, e.g. to a failover), unchanged, failed.",
		}, []string{"outcome"}),
		HistorySigns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "finalizer_history_signs_total",
			Help: "Signs that a table's history changed under its verdict, by kind: reset (a new query id at batch 0 on a table with a verdict), behind (each candidate below the stored end), source_changed (the source picked by index has another description).",
		}, []string{"kind"}),
		Rewinds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "finalizer_rewinds_seen_total",
			Help: "Operator rewinds (finalizer rewind) this service heard of; its trackers of the table start again from the rewound verdict.",
		}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "finalizer_refused_total",
			Help: "Runs refused tracking, by reason: table_name (invalid or too long), query_name (too long), run_cap (too many tracked runs), busy (too many discovered runs waiting for a decision; found again by a rescan).",
		}, []string{"reason"}),
		now:    now,
		tables: make(map[string]*tableFigures),
		lagDesc: prometheus.NewDesc("finalizer_verdict_lag_seconds",
			"Seconds between now and the table's finalized_until.", []string{"table"}, nil),
		tsDesc: prometheus.NewDesc("finalizer_verdict_timestamp_seconds",
			"The table's finalized_until as a Unix timestamp.", []string{"table"}, nil),
		missingDesc: prometheus.NewDesc("finalizer_verdict_missing_seconds",
			"Seconds since this process first tracked the table, while the table has no verdict (finalized_until) yet; absent once it has one.", []string{"table"}, nil),
		droppedDesc: prometheus.NewDesc("finalizer_rows_dropped_by_watermark_total",
			"Rows Spark dropped as later than the watermark (numRowsDroppedByWatermark), by table.", []string{"table"}, nil),
	}
	for _, kind := range []string{SignReset, SignBehind, SignSourceChanged} {
		m.HistorySigns.WithLabelValues(kind) // exported at 0, so that increase() sees the first sign
	}
	if prom != nil {
		prom.MustRegister(m.Events, m.Candidates, m.HeldRuns, m.QuietAdvances, m.Advances, m.Writes, m.FailedAdvances,
			m.Retries, m.TrackedRuns, m.StaleRuns, m.JoinWaitingTables, m.AdvanceSeconds, m.AdvanceBatchSize, m.Reasserts, m.Refused,
			m.HistorySigns, m.Rewinds, tableCollector{m})
	}
	return m
}

// CountEvent counts one listener event in Events (finalizer_events_total)
// by its kind and outcome. It is Events.WithLabelValues(kind.String(),
// outcome).Inc() with the child looked up once.
func (m *Metrics) CountEvent(kind progress.Kind, outcome string) {
	if kind > progress.KindTerminated {
		kind = progress.KindUnknown
	}
	child(&m.events[kind], outcome, func() prometheus.Counter {
		return m.Events.WithLabelValues(kind.String(), outcome)
	}).Inc()
}

// candidate returns the child of Candidates for outcome.
func (m *Metrics) candidate(outcome string) prometheus.Counter {
	return child(&m.candidates, outcome, func() prometheus.Counter { return m.Candidates.WithLabelValues(outcome) })
}

// quietAdvance returns the child of QuietAdvances for signal.
func (m *Metrics) quietAdvance(signal string) prometheus.Counter {
	return child(&m.quiet, signal, func() prometheus.Counter { return m.QuietAdvances.WithLabelValues(signal) })
}

// child returns the counter cached under key in cache, looking it up with
// lookup the first time. The keys are a small fixed set (kinds, outcomes,
// signals), so the cache stays small.
func child(cache *sync.Map, key string, lookup func() prometheus.Counter) prometheus.Counter {
	if c, ok := cache.Load(key); ok {
		return c.(prometheus.Counter)
	}
	c, _ := cache.LoadOrStore(key, lookup())
	return c.(prometheus.Counter)
}

// SetVerdict records a table's verdict for the lag gauges even when it is
// older than the one recorded: after a rewind.
func (m *Metrics) SetVerdict(table string, until time.Time) {
	m.mu.Lock()
	m.table(table).until = until
	m.mu.Unlock()
}

// table returns the table's figures, made at the first use. m.mu held.
func (m *Metrics) table(table string) *tableFigures {
	f := m.tables[table]
	if f == nil {
		if len(m.figures) == 0 {
			m.figures = make([]tableFigures, figuresBlock)
		}
		f, m.figures = &m.figures[0], m.figures[1:]
		f.known = m.now()
		m.tables[table] = f
	}
	return f
}

// ObserveVerdict records a table's verdict for the lag gauges. An older
// value than the one recorded is ignored.
func (m *Metrics) ObserveVerdict(table string, until time.Time) {
	m.mu.Lock()
	if f := m.table(table); f.until.IsZero() || until.After(f.until) {
		f.until = until
	}
	m.mu.Unlock()
}

// KnowTable makes the table's per-table figures when it has none: a
// table tracked without a verdict yet is exported as such
// (finalizer_verdict_missing_seconds), so that an alert on a table that
// never gets one can fire. The registry calls it when a tracker starts.
func (m *Metrics) KnowTable(table string) {
	m.mu.Lock()
	m.table(table)
	m.mu.Unlock()
}

// AddRowsDropped adds n rows dropped by the watermark to the table's
// finalizer_rows_dropped_by_watermark_total.
func (m *Metrics) AddRowsDropped(table string, n int64) {
	if n > 0 {
		m.droppedRows(table).Add(n)
	}
}

// droppedRows returns the table's counter of rows dropped by the
// watermark, for a tracker to keep.
func (m *Metrics) droppedRows(table string) *atomic.Int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &m.table(table).dropped
}

// RowsDropped returns the table's finalizer_rows_dropped_by_watermark_total.
func (m *Metrics) RowsDropped(table string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.tables[table]; f != nil {
		return f.dropped.Load()
	}
	return 0
}

// tableCollector exports the per-table figures at scrape time: the lag of
// every observed table, and the rows dropped by the watermark of those
// that had any.
type tableCollector struct{ m *Metrics }

func (c tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.lagDesc
	ch <- c.m.tsDesc
	ch <- c.m.missingDesc
	ch <- c.m.droppedDesc
}

// The figures are copied under m.mu, in chunks of collectChunk tables,
// and sent after: a send waits for the gatherer, and every verdict a
// tracker records (ObserveVerdict) takes m.mu; held for a scrape of
// 100,000 tables, it stalled them (issue 12, "The latency tail").
func (c tableCollector) Collect(ch chan<- prometheus.Metric) {
	type figures struct {
		table        string
		until, known time.Time
		dropped      int64
	}
	now := c.m.now()
	c.m.mu.Lock()
	all := make([]figures, 0, len(c.m.tables))
	for table, f := range c.m.tables {
		all = append(all, figures{table, f.until, f.known, f.dropped.Load()})
		if len(all)%collectChunk == 0 {
			// The map may change meanwhile: a table added is exported
			// now or at the next scrape.
			c.m.mu.Unlock()
			c.m.mu.Lock()
		}
	}
	c.m.mu.Unlock()
	for _, f := range all {
		if !f.until.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.m.lagDesc, prometheus.GaugeValue, now.Sub(f.until).Seconds(), f.table)
			ch <- prometheus.MustNewConstMetric(c.m.tsDesc, prometheus.GaugeValue, float64(f.until.UnixMilli())/1000, f.table)
		} else {
			ch <- prometheus.MustNewConstMetric(c.m.missingDesc, prometheus.GaugeValue, max(now.Sub(f.known).Seconds(), 0), f.table)
		}
		if f.dropped > 0 {
			ch <- prometheus.MustNewConstMetric(c.m.droppedDesc, prometheus.CounterValue, float64(f.dropped), f.table)
		}
	}
}

// collectChunk is how many tables tableCollector copies under Metrics.mu
// at once.
const collectChunk = 1024
