package ownership

import "github.com/prometheus/client_golang/prometheus"

// metrics are the Owner's collectors.
type metrics struct {
	owned     prometheus.Gauge
	members   prometheus.Gauge
	connected prometheus.Gauge
	heldNow   prometheus.Gauge
	acquired  prometheus.Counter
	held      prometheus.Counter
	written   *prometheus.CounterVec
	moved     *prometheus.CounterVec
	refused   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "finalizer_ownership_buckets_owned",
			Help: "Buckets of tables whose advisory lock this replica holds: it writes their verdicts."}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{Name: "finalizer_ownership_replicas",
			Help: "Replicas sharing the control table's buckets, as the locks show them."}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "finalizer_ownership_connected",
			Help: "1 while the lock connection to the control database is up."}),
		heldNow: prometheus.NewGauge(prometheus.GaugeOpts{Name: "finalizer_ownership_held_advances",
			Help: "Newest advances kept per (table, feeder), to be written at a takeover or after a failover."}),
		acquired: prometheus.NewCounter(prometheus.CounterOpts{Name: "finalizer_ownership_buckets_taken_total",
			Help: "Buckets this replica took: at its start, when another replica died or gave them back."}),
		held: prometheus.NewCounter(prometheus.CounterOpts{Name: "finalizer_ownership_advances_held_total",
			Help: "Advances of tables another replica owns, answered without a statement."}),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "finalizer_ownership_held_written_total",
			Help: "Held advances written, by why: flush (a bucket taken, a reconnect) or fallback (its owner did not write it within the grace)."}, []string{"why"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "finalizer_ownership_held_refused_total",
			Help: "Held advances this replica wrote that the control table refused as decided before their table's last rewind; dropped, and their runs told (shown as before_rewind)."}),
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "finalizer_ownership_held_moved_total",
			Help: "Held advances whose write moved the verdict, by why: a fallback that moves one says the owner did not write it."}, []string{"why"}),
	}
	for _, why := range []string{"flush", "fallback"} {
		m.written.WithLabelValues(why) // exported at 0 from the start
		m.moved.WithLabelValues(why)
	}
	if reg != nil {
		reg.MustRegister(m.owned, m.members, m.connected, m.heldNow, m.acquired, m.held, m.written, m.moved, m.refused)
	}
	return m
}
