package statuspage

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/finalizer"
)

// Defaults of Options.
const (
	// DefaultHistory is how far back the lag timeline of each table goes.
	DefaultHistory = 6 * time.Hour
	// DefaultHistoryMoves caps the moves kept per table (16 bytes each):
	// a table that moves every minute shows its last two hours.
	DefaultHistoryMoves = 120
	// DefaultRunsEvery is how often the tracked runs are read again while
	// a browser watches (they live in memory; a run turns stale without
	// any announcement), and how old a model a request without a stream
	// may be served.
	DefaultRunsEvery = 2 * time.Second
	// DefaultTablesEvery is how often the verdicts are read again without
	// an announcement while a browser watches, and how old a read of them
	// the first request after nobody watched may be served.
	DefaultTablesEvery = 30 * time.Second
	// DefaultMinRefresh is the shortest time between two reads of the
	// verdicts while a browser watches: a burst of announcements (every
	// table crossing an hour) costs one read.
	DefaultMinRefresh = 250 * time.Millisecond
	// DefaultReconcileEvery is the shortest time between two reads of the
	// verdicts for the lag timeline while nobody watches, after the LISTEN
	// connection said announcements may have been lost.
	DefaultReconcileEvery = time.Minute
	// DefaultMaxStreams caps the browsers watching at once.
	DefaultMaxStreams = 64
	// streamBuffer is how many updates a browser may fall behind before
	// its stream is closed (it reconnects and catches up at once).
	streamBuffer = 16
	// streamPing keeps idle streams open through proxies.
	streamPing = 15 * time.Second
	// writeTimeout bounds one write to a browser.
	writeTimeout = 10 * time.Second
)

// Verdicts is where the page reads the verdicts and hears of their moves
// (*control.Store).
type Verdicts interface {
	List(ctx context.Context) ([]control.Verdict, error)
	// Feeders returns every table's feeders (table "").
	Feeders(ctx context.Context, table string) ([]control.Feeder, error)
	Watch(fn func(control.Notification)) (stop func(), err error)
}

// Runs is where the page reads the tracked runs (*finalizer.Registry).
type Runs interface {
	Status() []finalizer.TrackerStatus
}

// joinWaiter is Runs that also says which tables wait for a new feeder's
// join, by table, each table's in the order they began (*finalizer.Registry
// does).
type joinWaiter interface {
	JoinWaitsByTable() map[string][]finalizer.JoinWait
}

// Options configure New. Verdicts and Runs are required.
type Options struct {
	Verdicts     Verdicts
	Runs         Runs
	StaleAfter   time.Duration // shown in the page's legend; 0 = finalizer.DefaultStaleAfter
	History      time.Duration // 0 = DefaultHistory
	HistoryMoves int           // 0 = DefaultHistoryMoves
	RunsEvery    time.Duration // 0 = DefaultRunsEvery
	TablesEvery  time.Duration // 0 = DefaultTablesEvery
	MinRefresh   time.Duration // 0 = DefaultMinRefresh
	// ReconcileEvery: 0 = DefaultReconcileEvery.
	ReconcileEvery time.Duration
	MaxStreams     int              // 0 = DefaultMaxStreams
	Now            func() time.Time // nil = time.Now
	Logger         *zap.Logger      // nil = no logs
}

//go:embed assets
var assets embed.FS

var pageTmpl = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"time": fmtTime, "unixms": func(t time.Time) int64 { return t.UnixMilli() },
}).ParseFS(assets, "assets/page.html"))

// Page is the status page. Create it with New, serve Handler, stop it with
// Close.
type Page struct {
	o       Options
	log     *zap.Logger
	epoch   string
	assets  http.Handler
	unwatch func()

	wake    chan struct{}      // capacity 1: announcements are waiting
	need    chan chan struct{} // a request wants a fresh model (see fresh)
	closing chan struct{}
	done    chan struct{}
	once    sync.Once

	pendMu   sync.Mutex
	pending  []control.Notification
	overflow bool // more announcements than maxPending: re-read all

	// Owned by the loop goroutine (and New before it starts).
	ctx         context.Context // cancelled by Close: ends a read in flight
	cancel      context.CancelFunc
	hist        *history
	verdicts    []control.Verdict // the last successful read
	feeders     map[string][]control.Feeder
	verdictsErr error         // the last read's error
	lastRead    time.Time     // of the verdicts and feeders (zero: never)
	lastRecon   time.Time     // of the verdicts for the timeline alone
	lost        bool          // announcements may have been lost since the last read
	cost        time.Duration // the last refresh's, with or without a read
	readCost    time.Duration // the last refresh's with a read

	mu        sync.RWMutex
	ver       uint64
	tables    []tableRow // sorted by table
	runs      []runRow   // sorted by table, then run
	moves     map[string][]move
	banner    string    // what is wrong with the page's sources, "" when nothing
	builtAt   time.Time // when the model was last built (zero: never)
	streams   map[*stream]struct{}
	noStreams bool // CloseStreams was called
}

// maxPending bounds the announcements waiting for the loop.
const maxPending = 10000

// New starts the page: it watches the verdicts' announcements. It reads
// nothing until someone looks (see loop). It fails only when the
// announcements cannot be watched.
func New(o Options) (*Page, error) {
	if o.StaleAfter == 0 {
		o.StaleAfter = finalizer.DefaultStaleAfter
	}
	if o.History == 0 {
		o.History = DefaultHistory
	}
	if o.HistoryMoves == 0 {
		o.HistoryMoves = DefaultHistoryMoves
	}
	if o.RunsEvery == 0 {
		o.RunsEvery = DefaultRunsEvery
	}
	if o.TablesEvery == 0 {
		o.TablesEvery = DefaultTablesEvery
	}
	if o.MinRefresh == 0 {
		o.MinRefresh = DefaultMinRefresh
	}
	if o.ReconcileEvery == 0 {
		o.ReconcileEvery = DefaultReconcileEvery
	}
	if o.MaxStreams == 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	sub, _ := fs.Sub(assets, "assets")
	p := &Page{
		o: o, log: o.Logger, epoch: hex.EncodeToString(b),
		assets: http.StripPrefix("/status/assets/", http.FileServerFS(sub)),
		wake:   make(chan struct{}, 1), need: make(chan chan struct{}), closing: make(chan struct{}), done: make(chan struct{}),
		hist: newHistory(o.History, o.HistoryMoves), moves: map[string][]move{}, streams: map[*stream]struct{}{},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	unwatch, err := o.Verdicts.Watch(p.announce)
	if err != nil {
		p.cancel()
		return nil, err
	}
	p.unwatch = unwatch
	go p.loop()
	return p, nil
}

// Close ends every stream, stops the page and waits for it. Safe to call
// more than once.
func (p *Page) Close() {
	p.once.Do(func() {
		p.unwatch()
		close(p.closing)
	})
	<-p.done
}

// CloseStreams ends every browser's stream, and refuses new ones, without
// waiting; for http.Server.RegisterOnShutdown, since a stream never goes
// idle by itself.
func (p *Page) CloseStreams() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noStreams = true
	for st := range p.streams {
		p.dropLocked(st)
	}
}

// announce receives an announcement on the LISTEN connection's goroutine
// (or Watch's caller's, under the listener's lock): it queues it (bounded)
// and wakes the loop, never blocking.
func (p *Page) announce(n control.Notification) {
	p.pendMu.Lock()
	if len(p.pending) < maxPending {
		p.pending = append(p.pending, n)
	} else {
		p.overflow = true
	}
	p.pendMu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// loop owns the model. What it costs depends on whether anyone looks:
//
//   - While a browser's stream is open, it rebuilds the model every
//     RunsEvery, reads the verdicts on announcements (at most every
//     MinRefresh) and every TablesEvery, and sends what changed.
//   - While nobody watches, an announcement only records the move in the
//     timeline (a few bytes, no read, no rebuild). The verdicts are read
//     for the timeline alone only after the LISTEN connection said moves
//     may have been lost (a reconnect, an unreadable announcement), and at
//     most every ReconcileEvery. Nothing else runs.
//   - A request (the page, or a stream's first event) asks for a fresh
//     model (fresh): the loop rebuilds it unless it is younger than
//     RunsEvery, reading the verdicts first if anything was announced or
//     lost since the last read or that read is older than TablesEvery.
func (p *Page) loop() {
	defer close(p.done)
	runsT := time.NewTicker(p.o.RunsEvery)
	defer runsT.Stop()
	tablesT := time.NewTicker(p.o.TablesEvery)
	defer tablesT.Stop()
	soon := time.NewTimer(time.Hour)
	soon.Stop()
	defer soon.Stop()
	recon := time.NewTimer(time.Hour)
	recon.Stop()
	defer recon.Stop()
	dirty, armed, reconArmed, ticked := false, false, false, false
	for {
		select {
		case <-p.closing:
			p.cancel()
			p.CloseStreams()
			return
		case <-p.wake:
			dirty = p.takeAnnouncements() || dirty
		case <-runsT.C:
			ticked = true
			dirty = dirty || p.verdictsErr != nil // retry a failed read with the runs' rhythm
		case <-tablesT.C:
			dirty = dirty || p.watched()
		case <-soon.C:
			armed = false
		case <-recon.C:
			reconArmed = false
		case done := <-p.need:
			if since := time.Since(p.builtAt0()); p.builtAt0().IsZero() || since >= max(p.o.RunsEvery, idleShare*p.cost) {
				read := dirty || p.lost || p.verdictsErr != nil || time.Since(p.lastRead) >= p.o.TablesEvery
				if read {
					dirty = false
				}
				p.refresh(read)
			}
			close(done)
			continue
		}
		if !p.watched() {
			if p.lost && !reconArmed {
				if wait := p.o.ReconcileEvery - min(time.Since(p.lastRecon), time.Since(p.lastRead)); wait > 0 {
					recon.Reset(wait)
					reconArmed = true
				} else {
					p.reconcile()
				}
			}
			continue
		}
		// Watched, the page spends at most about a tenth of its time
		// rebuilding, however large the registry and the control table
		// and however many announcements: the gap after a refresh is
		// at least idleShare times what it took.
		read := false
		if dirty && !armed {
			if wait := max(p.o.MinRefresh, idleShare*p.readCost) - time.Since(p.lastRead); wait > 0 {
				soon.Reset(wait)
				armed = true
			} else {
				read, dirty = true, false
			}
		}
		if !read && (!ticked || time.Since(p.builtAt0()) < idleShare*p.cost) {
			continue // the runs are read on their tick alone
		}
		ticked = false
		p.refresh(read)
	}
}

// idleShare is how many times a refresh's duration the watched page
// waits before the next one (see loop).
const idleShare = 9

// builtAt0 returns when the model was last built.
func (p *Page) builtAt0() time.Time {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.builtAt
}

// watched reports whether a browser's stream is open.
func (p *Page) watched() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.streams) > 0
}

// stale reports whether the model is older than RunsEvery.
func (p *Page) stale() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.builtAt.IsZero() || time.Since(p.builtAt) >= p.o.RunsEvery
}

// fresh makes the model at most RunsEvery old before a request is served
// from it: while a stream is open the loop keeps it so; otherwise the loop
// rebuilds it now. It gives up (serving what there is) when ctx ends or
// the page closes.
func (p *Page) fresh(ctx context.Context) {
	if !p.stale() {
		return
	}
	done := make(chan struct{})
	select {
	case p.need <- done:
	case <-ctx.Done():
		return
	case <-p.done:
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	case <-p.done:
	}
}

// takeAnnouncements records the waiting announcements in the history. It
// reports whether the verdicts must be read again (always, when there
// was one: the announcement carries no provenance). An announcement
// without a table, or too many waiting, means moves may have been lost.
func (p *Page) takeAnnouncements() bool {
	p.pendMu.Lock()
	ns, overflow := p.pending, p.overflow
	p.pending, p.overflow = nil, false
	p.pendMu.Unlock()
	now := p.o.Now()
	for _, n := range ns {
		if n.Table != "" {
			p.hist.record(n.Table, now, n.FinalizedUntil, now, n.Rewound)
		} else {
			p.lost = true
		}
	}
	p.lost = p.lost || overflow
	return len(ns) > 0 || overflow
}
