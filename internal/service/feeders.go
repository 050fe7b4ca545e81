package service

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/listener"
)

// retireTimeout bounds one retirement asked for over NATS.
const retireTimeout = 30 * time.Second

// expectFeeders records the feeders the rules expect (Rule.Feeders, ADR
// 0012) before any tracker starts, so that one that has not reported
// holds its table from the first advance on. A failure stops the start:
// without the record, the table could be declared final on the word of
// half its writers.
func (s *Service) expectFeeders(ctx context.Context) error {
	byTable := map[string][]string{}
	for _, r := range s.opts.Registry.Rules {
		byTable[r.Table] = append(byTable[r.Table], r.Feeders...)
	}
	tables := make([]string, 0, len(byTable))
	for t, fs := range byTable {
		if len(fs) > 0 {
			tables = append(tables, t)
		}
	}
	sort.Strings(tables)
	for _, t := range tables {
		added, err := s.store.ExpectFeeders(ctx, t, byTable[t])
		if err != nil {
			return fmt.Errorf("record the expected feeders of %s: %w", t, err)
		}
		if len(added) > 0 {
			s.log.Info("expected feeders recorded; each holds the table until it reports",
				zap.String("table", t), zap.Strings("feeders", added))
		}
	}
	return nil
}

// handleRetire serves a RetireRequest (the NATS twin of `finalizer
// feeders retire`).
func (s *Service) handleRetire(ctx context.Context, r listener.RetireRequest) listener.RetireReply {
	if r.Table == "" || r.Query == "" {
		return listener.RetireReply{Error: "table and query are required"}
	}
	ctx, cancel := context.WithTimeout(ctx, retireTimeout)
	defer cancel()
	if r.Unretire {
		return s.handleUnretire(ctx, r)
	}
	why, err := RetireWhy("NATS", r.By, r.Reason)
	if err != nil {
		return listener.RetireReply{Error: err.Error()}
	}
	retired, v, moved, err := s.store.RetireFeeder(ctx, r.Table, r.Query, why)
	if err != nil {
		return listener.RetireReply{Error: err.Error()}
	}
	reply := listener.RetireReply{OK: true, Moved: moved}
	for _, f := range retired {
		reply.Retired = append(reply.Retired, f.Feeder)
	}
	if !v.FinalizedUntil.IsZero() {
		reply.FinalizedUntil = v.FinalizedUntil.Format(time.RFC3339Nano)
	}
	s.log.Info("feeder retired", zap.String("table", r.Table), zap.String("query", r.Query),
		zap.Strings("feeders", reply.Retired), zap.String("reason", why), zap.Bool("moved", moved))
	return reply
}

// RetireWhy is what a retirement asked for over via ("HTTP", "NATS") keeps
// in the feeder's retired_why, as `finalizer feeders retire` keeps its
// --by and --reason: "retired over HTTP by ops@host: backfill done". by
// and reason are checked as the CLI checks them (control.CheckOperatorText:
// an error wrapping control.ErrInvalidText); by was neither checked nor
// kept.
func RetireWhy(via, by, reason string) (string, error) {
	by, reason = strings.TrimSpace(by), strings.TrimSpace(reason)
	if err := control.CheckOperatorText("the reason", reason); err != nil {
		return "", err
	}
	if err := control.CheckOperatorText("by", by); err != nil {
		return "", err
	}
	why := "retired over " + via
	if by != "" {
		why += " by " + by
	}
	if reason != "" {
		why += ": " + reason
	}
	return why, nil
}

// handleUnretire serves a RetireRequest on the unretire subject (the
// NATS twin of `finalizer feeders unretire`): audited as by r.By, or
// "NATS API" when it names nobody.
func (s *Service) handleUnretire(ctx context.Context, r listener.RetireRequest) listener.RetireReply {
	by := strings.TrimSpace(r.By)
	if by == "" {
		by = "NATS API"
	}
	back, v, err := s.store.UnretireFeeder(ctx, r.Table, r.Query, strings.TrimSpace(r.Reason), by)
	if err != nil {
		return listener.RetireReply{Error: err.Error()}
	}
	reply := listener.RetireReply{OK: true}
	for _, f := range back {
		reply.Unretired = append(reply.Unretired, f.Feeder)
	}
	if !v.FinalizedUntil.IsZero() {
		reply.FinalizedUntil = v.FinalizedUntil.Format(time.RFC3339Nano)
	}
	s.log.Info("feeder taken back; it holds the table again", zap.String("table", r.Table), zap.String("query", r.Query),
		zap.Strings("feeders", reply.Unretired), zap.String("reason", r.Reason), zap.String("by", by))
	return reply
}

// feederCollector exports each feeder's watermark and lag and which
// feeder holds each table, read from the feeders table at scrape time.
type feederCollector struct {
	store     *control.Store
	now       func() time.Time
	watermark *prometheus.Desc
	lag       *prometheus.Desc
	held      *prometheus.Desc
	errors    prometheus.Counter
}

func newFeederCollector(store *control.Store, now func() time.Time) *feederCollector {
	labels := []string{"table", "feeder", "query_name"}
	return &feederCollector{
		store: store,
		now:   now,
		watermark: prometheus.NewDesc("finalizer_feeder_watermark_timestamp_seconds",
			"Each active feeder's own watermark (ADR 0015) as a Unix time.", labels, nil),
		lag: prometheus.NewDesc("finalizer_feeder_lag_seconds",
			"now - each active feeder's watermark.", labels, nil),
		held: prometheus.NewDesc("finalizer_table_held",
			"1 for the feeder that holds a table of several feeders back (the lowest watermark, or one expected that never reported).", labels, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "finalizer_feeder_scrape_errors_total",
			Help: "Scrapes that could not read the feeders table.",
		}),
	}
}

func (c *feederCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.watermark
	ch <- c.lag
	ch <- c.held
	c.errors.Describe(ch)
}

func (c *feederCollector) Collect(ch chan<- prometheus.Metric) {
	defer c.errors.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	fs, err := c.store.Feeders(ctx, "")
	if err != nil {
		c.errors.Inc()
		return
	}
	now := c.now()
	byTable := map[string][]control.Feeder{}
	for _, f := range fs {
		byTable[f.Table] = append(byTable[f.Table], f)
		if f.Retired() || f.FinalizedUntil.IsZero() {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.watermark, prometheus.GaugeValue, float64(f.FinalizedUntil.Unix()), f.Table, f.Feeder, f.QueryName)
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, now.Sub(f.FinalizedUntil).Seconds(), f.Table, f.Feeder, f.QueryName)
	}
	for _, tfs := range byTable {
		if h, held := control.HeldBy(tfs); held {
			ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, 1, h.Table, h.Feeder, h.QueryName)
		}
	}
}
