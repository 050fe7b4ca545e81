package actions

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the actions' metrics, labelled by action name and kind.
type metrics struct {
	reg                      prometheus.Registerer
	delivered, retried, dead *prometheus.CounterVec
	lag                      *prometheus.HistogramVec
	backlog                  *backlogCollector
}

func newMetrics(reg prometheus.Registerer, d *Dispatcher) (*metrics, error) {
	labels := []string{"action", "kind"}
	m := &metrics{
		reg: reg,
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "finalizer_action_delivered_total",
			Help: "Events an action delivered (once per period that became final, per action; a redelivery after a crash counts again).",
		}, labels),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "finalizer_action_retries_total",
			Help: "Failed deliveries of an action that will be retried with backoff.",
		}, labels),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "finalizer_action_dead_lettered_total",
			Help: "Events an action gave up on: out of attempts, or its queue was full. They stay in the _sends table (state dead) for the dead-letter retention.",
		}, labels),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "finalizer_action_lag_seconds",
			Help:    "From the commit of the move that made a period final to its event's delivery.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, labels),
		backlog: &backlogCollector{d: d},
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.delivered, m.retried, m.dead, m.lag, m.backlog} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range []prometheus.Collector{m.delivered, m.retried, m.dead, m.lag, m.backlog} {
		m.reg.Unregister(c)
	}
}

var (
	pendingDesc = prometheus.NewDesc("finalizer_action_pending",
		"Events waiting for their delivery, per action (read from PostgreSQL at scrape time). action=\"\" counts the moves not yet expanded into events.",
		[]string{"action", "kind"}, nil)
	oldestDesc = prometheus.NewDesc("finalizer_action_oldest_pending_seconds",
		"Age of the oldest event waiting for its delivery (from its move): a stuck action grows it.",
		[]string{"action", "kind"}, nil)
	deadDesc = prometheus.NewDesc("finalizer_action_dead",
		"Dead-lettered events kept, per action.",
		[]string{"action", "kind"}, nil)
)

// backlogCollector reads the actions' backlog at scrape time.
type backlogCollector struct{ d *Dispatcher }

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- oldestDesc
	ch <- deadDesc
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	totals, err := c.d.o.Outbox.Totals(ctx)
	if err != nil {
		return // the readiness metrics say PostgreSQL is down
	}
	now := c.d.o.Now()
	emit := func(name, kind string, pending, dead int, oldest time.Time) {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(pending), name, kind)
		age := 0.0
		if !oldest.IsZero() {
			age = now.Sub(oldest).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age, name, kind)
		if kind != "" {
			ch <- prometheus.MustNewConstMetric(deadDesc, prometheus.GaugeValue, float64(dead), name, kind)
		}
	}
	for key, a := range c.d.actions {
		t := totals[key]
		emit(a.Name, a.Kind, t.Pending, t.Dead, t.OldestMovedAt)
	}
	t := totals[""]
	emit("", "", t.Pending, 0, t.OldestMovedAt)
}
