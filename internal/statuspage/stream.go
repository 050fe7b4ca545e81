package statuspage

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// stream is one browser's event stream.
type stream struct {
	ch   chan []byte   // updates; full means the browser is too slow
	gone chan struct{} // closed when the page drops the stream
}

// dropLocked ends a stream. p.mu is held.
func (p *Page) dropLocked(st *stream) {
	if _, ok := p.streams[st]; ok {
		delete(p.streams, st)
		close(st.gone)
	}
}

// subscribe registers a stream and returns the event that brings a
// browser at version since (epoch-ver, "" for none) up to date: the rows
// that changed after since, or all of them, and the order of all keys. It
// returns nil when there are too many streams or they were closed.
func (p *Page) subscribe(since string) (*stream, []byte) {
	now := p.o.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.noStreams || len(p.streams) >= p.o.MaxStreams {
		return nil, nil
	}
	var after uint64
	if e, v, ok := strings.Cut(since, "-"); ok && e == p.epoch {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && n <= p.ver {
			after = n
		}
	}
	var tables, runs []int
	for i, t := range p.tables {
		if t.ver > after {
			tables = append(tables, i)
		}
	}
	for i, r := range p.runs {
		if r.ver > after {
			runs = append(runs, i)
		}
	}
	u := update{Now: now.UnixMilli(), Banner: p.banner,
		Tables: p.renderTablesLocked(tables, true, now), Runs: p.renderRunsLocked(runs, true)}
	st := &stream{ch: make(chan []byte, streamBuffer), gone: make(chan struct{})}
	p.streams[st] = struct{}{}
	return st, p.eventLocked(u)
}

func (p *Page) unsubscribe(st *stream) {
	p.mu.Lock()
	p.dropLocked(st)
	p.mu.Unlock()
}

// serveEvents is GET /status/events: server-sent events, one "update"
// per change, from the version in Last-Event-ID (a reconnect) or ?since=
// (the page's first connect).
func (p *Page) serveEvents(w http.ResponseWriter, r *http.Request) {
	since := r.Header.Get("Last-Event-ID")
	if since == "" {
		since = r.URL.Query().Get("since")
	}
	p.fresh(r.Context())
	st, first := p.subscribe(since)
	if st == nil {
		w.Header().Set("Retry-After", "10")
		http.Error(w, "too many status page streams", http.StatusServiceUnavailable)
		return
	}
	defer p.unsubscribe(st)
	rc := http.NewResponseController(w)
	// A connection the server keeps must not keep this stream's deadline.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(fmt.Appendf(nil, "retry: 2000\n\n")) || !write(first) {
		return
	}
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	for {
		select {
		case msg := <-st.ch:
			if !write(msg) {
				return
			}
		case <-ping.C:
			if !write([]byte(": ping\n\n")) {
				return
			}
		case <-st.gone:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// Handler serves GET / (the page), GET /status/events and
// GET /status/assets/.
func (p *Page) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.servePage)
	mux.HandleFunc("GET /status/events", p.serveEvents)
	mux.Handle("GET /status/assets/", p.assets)
	return mux
}
