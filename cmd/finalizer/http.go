package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/internal/lograte"
	"github.com/finalizer-dev/finalizer/internal/service"
)

// maxLongPoll bounds the wait of GET /v1/tables/{table}/final.
const maxLongPoll = 5 * time.Minute

// newHTTPHandler serves the HTTP API (docs/contract.md §6).
func newHTTPHandler(svc *service.Service) http.Handler {
	store, registry, log := svc.Store(), svc.Registry(), svc.Logger()
	edgeLog := lograte.New(time.Now, edgeLogEvery)
	// The handler has no loop: the service says the lines it held back
	// when no later line of their class goes out.
	svc.ReportHeld(func(final bool) { edgeLog.Report(log, "http", final) })
	httpError := func(w http.ResponseWriter, err error) { writeHTTPError(w, err, log, edgeLog) }
	// table reads a table name from the path and answers 400 with a plain
	// reason when the control table could not hold it (a NUL, bytes that
	// are not UTF-8, a control character, over 1,024 bytes): such a name
	// never reaches PostgreSQL.
	table := func(w http.ResponseWriter, r *http.Request) (string, bool) {
		name := r.PathValue("table")
		if err := control.CheckTableName(name); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return "", false
		}
		return name, true
	}
	prom := svc.Prometheus()
	mux := http.NewServeMux()
	if page := svc.StatusPage(); page != nil {
		h := page.Handler() // the status page (internal/statuspage)
		mux.Handle("GET /{$}", h)
		mux.Handle("GET /status/", h)
	}
	mux.Handle("GET /metrics", metricsHandler(prom, svc.Counters()))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	// /readyz answers anyone (no token), so it says up or down per part and
	// nothing more: the reason (which may name the database, its user,
	// host and port) goes to the log, at most once per part every 10 s.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		checks := map[string]string{"postgres": "up", "nats": "up", "stream": "up"}
		code := http.StatusOK
		pg, nats, stream := svc.Ready(r.Context()) // as finalizer_postgres_up, finalizer_nats_up, finalizer_stream_up
		for part, err := range map[string]error{"postgres": pg, "nats": nats, "stream": stream} {
			if err != nil {
				checks[part], code = "down", http.StatusServiceUnavailable
				if ok, n := edgeLog.Allow(zapcore.WarnLevel, "readyz/"+part); ok {
					log.Warn("not ready", zap.String("part", part), zap.Error(err), zap.Int("suppressed", n))
				}
			}
		}
		writeJSON(w, code, checks)
	})
	// The listings are paged (?limit=N, at most maxPage, and ?after= the
	// "next" of the previous page) and cost O(tables + runs): a flood of
	// runs cannot make one answer huge or slow.
	mux.HandleFunc("GET /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		limit, ok := pageLimit(w, r)
		if !ok {
			return
		}
		// ?table=T: that table's runs alone (is-final's and wait's why):
		// its trackers' statuses only, not every tracker's.
		only := r.URL.Query().Get("table")
		var all []finalizer.TrackerStatus
		if only != "" {
			all = registry.StatusOf(only) // sorted by run
		} else {
			all = registry.Status() // sorted by table, then run
		}
		after := r.URL.Query().Get("after")
		start := sort.Search(len(all), func(i int) bool { return runCursor(all[i]) > after })
		page, next := all[start:], ""
		if len(page) > limit {
			page, next = page[:limit], runCursor(page[limit-1])
		}
		doc := map[string]any{"runs": page, "next": next}
		if after == "" {
			// The runs waiting to join a table's feeders before they are
			// tracked, and holding it meanwhile: on the first page.
			var waits []finalizer.JoinWait
			if only != "" {
				waits = registry.JoinWaitsOf(only)
			} else {
				waits = registry.JoinWaits()
			}
			if waits == nil {
				waits = []finalizer.JoinWait{}
			}
			doc["join_waits"] = waits
		}
		writeJSON(w, http.StatusOK, doc)
	})
	mux.HandleFunc("GET /v1/tables", func(w http.ResponseWriter, r *http.Request) {
		limit, ok := pageLimit(w, r)
		if !ok {
			return
		}
		// One page read from PostgreSQL (keyset on the table name), not the
		// whole control table for every page.
		after := r.URL.Query().Get("after")
		vs, fs, next, err := store.TablesPage(r.Context(), after, limit)
		if err != nil {
			httpError(w, err)
			return
		}
		page, next := tablesPage(vs, fs, registry.Status(), registry.JoinWaitsByTable(), after, next, limit, time.Now().UTC())
		if err := withActions(r.Context(), svc, page, ""); err != nil {
			httpError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"tables": page, "next": next})
	})
	mux.HandleFunc("GET /v1/tables/{table}", func(w http.ResponseWriter, r *http.Request) {
		table, ok := table(w, r)
		if !ok {
			return
		}
		v, err := store.Get(r.Context(), table)
		if err != nil && !errors.Is(err, control.ErrNotFound) {
			httpError(w, err)
			return
		}
		fs, ferr := store.Feeders(r.Context(), table)
		if ferr != nil {
			httpError(w, ferr)
			return
		}
		waits := registry.JoinWaitsOf(table)
		if err != nil && len(fs) == 0 && waits == nil {
			httpError(w, err) // no verdict, no feeder, no join waited for: 404
			return
		}
		if err != nil {
			v = control.Verdict{Table: table} // held before its first verdict
		}
		st := []tableStatus{toTableStatus(v, time.Now().UTC(), registry.Status(), fs)}
		if waits != nil {
			attachJoinWaits(st, map[string][]finalizer.JoinWait{table: waits})
		}
		if err := withActions(r.Context(), svc, st, table); err != nil {
			httpError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st[0])
	})
	mux.HandleFunc("POST /v1/tables/{table}/feeders/{query}/retire", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Reason string `json:"reason"`
			By     string `json:"by"`
		}
		if r.ContentLength != 0 {
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body: want {\"reason\": \"...\", \"by\": \"...\"}: " + err.Error()})
				return
			}
		}
		why, err := service.RetireWhy("HTTP", body.By, body.Reason)
		if err != nil {
			feederError(w, err, httpError)
			return
		}
		table, ok := table(w, r)
		if !ok {
			return
		}
		query := r.PathValue("query")
		retired, v, moved, err := store.RetireFeeder(r.Context(), table, query, why)
		if err != nil {
			feederError(w, err, httpError)
			return
		}
		ids := feederIDs(retired)
		log.Info("feeder retired", zap.String("table", table), zap.String("query", query),
			zap.Strings("feeders", ids), zap.String("reason", why), zap.Bool("moved", moved))
		resp := map[string]any{"table": table, "retired": ids, "moved": moved}
		if !v.FinalizedUntil.IsZero() {
			resp["finalized_until"] = v.FinalizedUntil
		}
		writeJSON(w, http.StatusOK, resp)
	})
	mux.HandleFunc("POST /v1/tables/{table}/feeders/{query}/unretire", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Reason string `json:"reason"`
			By     string `json:"by"`
		}
		if r.ContentLength != 0 {
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body: want {\"reason\": \"...\", \"by\": \"...\"}: " + err.Error()})
				return
			}
		}
		by := strings.TrimSpace(body.By)
		if by == "" {
			by = "HTTP API"
		}
		table, ok := table(w, r)
		if !ok {
			return
		}
		query := r.PathValue("query")
		back, v, err := store.UnretireFeeder(r.Context(), table, query, strings.TrimSpace(body.Reason), by)
		if err != nil {
			feederError(w, err, httpError)
			return
		}
		ids := feederIDs(back)
		log.Info("feeder taken back; it holds the table again", zap.String("table", table), zap.String("query", query),
			zap.Strings("feeders", ids), zap.String("reason", body.Reason), zap.String("by", by))
		resp := map[string]any{"table": table, "unretired": ids}
		if !v.FinalizedUntil.IsZero() {
			resp["finalized_until"] = v.FinalizedUntil
		}
		writeJSON(w, http.StatusOK, resp)
	})
	mux.HandleFunc("GET /v1/tables/{table}/final", func(w http.ResponseWriter, r *http.Request) {
		table, ok := table(w, r)
		if !ok {
			return
		}
		q := r.URL.Query()
		end, err := parseURLTime(q.Get("period_end"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "period_end: " + err.Error()})
			return
		}
		var wait time.Duration
		if ws := q.Get("wait"); ws != "" {
			if wait, err = time.ParseDuration(ws); err != nil || wait < 0 {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "wait: want a duration such as 30s"})
				return
			}
			wait = min(wait, maxLongPoll)
		}
		// finalized_until is null while the table has no verdict (no row,
		// or a row whose feeders have not all reported): never the zero
		// time.
		resp := map[string]any{"table": table, "period_end": end, "final": false, "finalized_until": nil}
		if wait > 0 {
			ctx, cancel := context.WithTimeout(r.Context(), wait)
			defer cancel()
			v, err := waitThroughOutages(ctx, store, table, end)
			switch {
			case err == nil:
				resp["final"], resp["finalized_until"] = true, v.FinalizedUntil
				writeJSON(w, http.StatusOK, resp)
				return
			case r.Context().Err() != nil:
				// The client hung up its long poll: nothing failed.
				log.Debug("http client closed a long poll", zap.String("table", table), zap.Duration("wait", wait))
				return
			case errors.Is(err, context.DeadlineExceeded):
			default:
				httpError(w, err)
				return
			}
		}
		v, err := store.Get(r.Context(), table)
		switch {
		case errors.Is(err, control.ErrNotFound):
			v = control.Verdict{Table: table}
		case err != nil:
			httpError(w, err)
			return
		default:
			setFinal(resp, v, end)
		}
		if resp["final"] == false {
			// Why not, as is-final and wait say it: what holds the
			// table and the runs the service holds, with their reasons.
			if why := serviceWhy(r.Context(), store, registry, v); why != "" {
				resp["why"] = why
			}
		}
		writeJSON(w, http.StatusOK, resp)
	})
	return mux
}

// serviceWhy is holdWhy for table v as the service knows it: its feeders
// from PostgreSQL, its runs and join waits from the registry. "" when its
// feeders cannot be read (the answer is then "not final" alone, as before).
func serviceWhy(ctx context.Context, store *control.Store, registry *finalizer.Registry, v control.Verdict) string {
	fs, err := store.Feeders(ctx, v.Table)
	if err != nil {
		return ""
	}
	var waits map[string][]finalizer.JoinWait
	if ws := registry.JoinWaitsOf(v.Table); ws != nil {
		waits = map[string][]finalizer.JoinWait{v.Table: ws}
	}
	return holdWhy(v, fs, registry.StatusOf(v.Table), waits)
}

// setFinal sets the answer of GET /v1/tables/{table}/final from the
// table's row v: final and finalized_until, left false and null when the
// row has no verdict yet (NULL finalized_until: its expected feeders have
// not all reported), not the zero time 0001-01-01T00:00:00Z.
func setFinal(resp map[string]any, v control.Verdict, end time.Time) {
	if v.FinalizedUntil.IsZero() {
		resp["final"], resp["finalized_until"] = false, nil
		return
	}
	resp["finalized_until"] = v.FinalizedUntil
	resp["final"] = v.Reaches(end)
}

// offsetAsSpace is an RFC 3339 time whose "+" offset arrived as a space:
// a "+" in a URL query that was not written as %2B decodes to " ".
var offsetAsSpace = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d+)?)?) (\d\d:\d\d)$`)

// withActions adds the actions' backlogs (of table, "" for all) to the
// tables' statuses, with the config's names of the actions.
func withActions(ctx context.Context, svc *service.Service, tables []tableStatus, table string) error {
	ob := svc.Outbox()
	if ob == nil {
		return nil
	}
	bs, err := ob.Backlogs(ctx, table)
	if err != nil {
		return err
	}
	var names map[string]string
	if d := svc.Dispatcher(); d != nil {
		names = d.ActionNames()
	}
	attachActions(tables, bs, names, time.Now().UTC())
	return nil
}

// feederError answers a failed retire or unretire: 404 for no such
// feeder, 409 for a name several active feeders share, 400 for a reason
// or by with a control character, else other.
func feederError(w http.ResponseWriter, err error, other func(http.ResponseWriter, error)) {
	switch {
	case errors.Is(err, control.ErrNoFeeder):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	case errors.Is(err, control.ErrAmbiguousFeeder):
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
	case errors.Is(err, control.ErrInvalidText):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	default:
		other(w, err)
	}
}

// feederIDs returns the ids of fs, in order.
func feederIDs(fs []control.Feeder) []string {
	ids := make([]string, 0, len(fs))
	for _, f := range fs {
		ids = append(ids, f.Feeder)
	}
	return ids
}

// parseURLTime reads a time from a URL query: as on the command line, and
// with the "+" of a positive offset accepted when it arrived as a space.
func parseURLTime(s string) (time.Time, error) {
	if m := offsetAsSpace.FindStringSubmatch(s); m != nil {
		s = m[1] + "+" + m[2]
	}
	t, err := parseTS(s)
	if err != nil && strings.Contains(s, " ") {
		return t, fmt.Errorf("%w (in a URL, write the + of an offset as %%2B)", err)
	}
	return t, err
}

// Paging of /v1/tables and /v1/runs.
const (
	defaultPage = 1000
	maxPage     = 10000
)

// pageLimit reads ?limit= (default defaultPage, at most maxPage); it
// answers 400 and reports false for a bad one.
func pageLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return defaultPage, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "limit: want a positive integer"})
		return 0, false
	}
	return min(n, maxPage), true
}

// runCursor is a run's place in /v1/runs' order (table, then run id);
// table names hold no NUL.
func runCursor(s finalizer.TrackerStatus) string { return s.Table + "\x00" + s.RunID }

// edgeLogEvery is how often the HTTP edge logs one class of failure, at
// most: a client repeating a failing request cannot flood the log.
const edgeLogEvery = 10 * time.Second

// writeHTTPError answers a failed request with a plain reason of our own:
// the error's text (PostgreSQL's, which may quote the request or name the
// database) goes only to the log, rate-limited per class.
func writeHTTPError(w http.ResponseWriter, err error, log *zap.Logger, limit *lograte.Limiter) {
	switch {
	case errors.Is(err, context.Canceled):
		log.Debug("http request cancelled: the client went away", zap.Error(err))
	case errors.Is(err, control.ErrNotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no verdict for this table"})
	case errors.Is(err, control.ErrInvalidTable):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid table name"})
	case errors.Is(err, control.ErrUnavailable):
		if ok, n := limit.Allow(zapcore.WarnLevel, "unavailable"); ok {
			log.Warn("http request failed: postgresql unavailable", zap.Error(err), zap.Int("suppressed", n))
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "postgresql unavailable"})
	default:
		if ok, n := limit.Allow(zapcore.ErrorLevel, "internal"); ok {
			log.Error("http request failed", zap.Error(err), zap.Int("suppressed", n))
		}
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error (see the service's log)"})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// waitThroughOutages is store.Wait for a long poll and for `finalizer
// wait`: a PostgreSQL outage (a restart, a failover to a promoted standby)
// within the wait's time is waited out and the wait taken up again, so the
// client gets its answer instead of a 503 or an exit 2 it must retry.
// Other errors and the wait's end return at once (at its end during an
// outage, with the outage's error: ctx says which).
func waitThroughOutages(ctx context.Context, store *control.Store, table string, end time.Time) (control.Verdict, error) {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0))
	for {
		v, err := store.Wait(ctx, table, end)
		if err == nil || !errors.Is(err, control.ErrUnavailable) || ctx.Err() != nil {
			return v, err
		}
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return control.Verdict{}, err
		case <-t.C:
		}
	}
}

// metricsHandler serves /metrics from all, and a request for named
// families only (?name[]=a&name[]=b, promhttp's filter) that counters
// holds every one of from counters: the same answer, without gathering
// every table's series and the feeders from PostgreSQL, which at 100,000
// tables costs more than a poller can pay at every read.
func metricsHandler(all, counters *prometheus.Registry) http.Handler {
	full := promhttp.HandlerFor(all, promhttp.HandlerOpts{Registry: all})
	light := promhttp.HandlerFor(counters, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		names := r.URL.Query()["name[]"]
		if len(names) == 0 || counters == nil {
			full.ServeHTTP(w, r)
			return
		}
		mfs, err := counters.Gather()
		if err != nil {
			full.ServeHTTP(w, r)
			return
		}
		have := make(map[string]bool, len(mfs))
		for _, mf := range mfs {
			have[mf.GetName()] = true
		}
		for _, n := range names {
			if !have[n] {
				full.ServeHTTP(w, r)
				return
			}
		}
		light.ServeHTTP(w, r)
	})
}
