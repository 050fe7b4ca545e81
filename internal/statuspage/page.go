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
	// DefaultRunsEvery is how often the tracked runs are read again (they
	// live in memory; a run turns stale without any announcement).
	DefaultRunsEvery = 2 * time.Second
	// DefaultTablesEvery is how often the verdicts are read again without
	// an announcement, in case one was lost.
	DefaultTablesEvery = 30 * time.Second
	// DefaultMinRefresh is the shortest time between two reads of the
	// verdicts: a burst of announcements (every table crossing an hour)
	// costs one read.
	DefaultMinRefresh = 250 * time.Millisecond
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

// Options configure New. Verdicts and Runs are required.
type Options struct {
	Verdicts     Verdicts
	Runs         Runs
	StaleAfter   time.Duration    // shown in the page's legend; 0 = finalizer.DefaultStaleAfter
	History      time.Duration    // 0 = DefaultHistory
	HistoryMoves int              // 0 = DefaultHistoryMoves
	RunsEvery    time.Duration    // 0 = DefaultRunsEvery
	TablesEvery  time.Duration    // 0 = DefaultTablesEvery
	MinRefresh   time.Duration    // 0 = DefaultMinRefresh
	MaxStreams   int              // 0 = DefaultMaxStreams
	Now          func() time.Time // nil = time.Now
	Logger       *zap.Logger      // nil = no logs
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

	wake    chan struct{} // capacity 1: announcements are waiting
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
	verdictsErr error // the last read's error

	mu        sync.RWMutex
	ver       uint64
	tables    []tableRow // sorted by table
	runs      []runRow   // sorted by table, then run
	moves     map[string][]move
	banner    string // what is wrong with the page's sources, "" when nothing
	streams   map[*stream]struct{}
	noStreams bool // CloseStreams was called
}

// maxPending bounds the announcements waiting for the loop.
const maxPending = 10000

// New starts the page: it watches the verdicts' announcements and reads
// the verdicts and runs once before it returns (a failed read is shown on
// the page, not returned). It fails only when the announcements cannot be
// watched.
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
		wake:   make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{}),
		hist: newHistory(o.History, o.HistoryMoves), moves: map[string][]move{}, streams: map[*stream]struct{}{},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	unwatch, err := o.Verdicts.Watch(p.announce)
	if err != nil {
		p.cancel()
		return nil, err
	}
	p.unwatch = unwatch
	p.refresh(true)
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

// announce receives an announcement on the LISTEN connection's goroutine:
// it queues it (bounded) and wakes the loop, never blocking.
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

func (p *Page) loop() {
	defer close(p.done)
	runsT := time.NewTicker(p.o.RunsEvery)
	defer runsT.Stop()
	tablesT := time.NewTicker(p.o.TablesEvery)
	defer tablesT.Stop()
	soon := time.NewTimer(time.Hour)
	soon.Stop()
	defer soon.Stop()
	dirty, armed, last := false, false, time.Now()
	for {
		select {
		case <-p.closing:
			p.cancel()
			p.CloseStreams()
			return
		case <-p.wake:
			dirty = p.takeAnnouncements() || dirty
		case <-runsT.C:
			dirty = dirty || p.verdictsErr != nil // retry a failed read with the runs' rhythm
		case <-tablesT.C:
			dirty = true
		case <-soon.C:
			armed = false
		}
		read := false
		if dirty && !armed {
			if wait := p.o.MinRefresh - time.Since(last); wait > 0 {
				soon.Reset(wait)
				armed = true
			} else {
				read, dirty, last = true, false, time.Now()
			}
		}
		p.refresh(read)
	}
}

// takeAnnouncements records the waiting announcements in the history. It
// reports whether the verdicts must be read again (always, when there
// was one: the announcement carries no provenance).
func (p *Page) takeAnnouncements() bool {
	p.pendMu.Lock()
	ns, overflow := p.pending, p.overflow
	p.pending, p.overflow = nil, false
	p.pendMu.Unlock()
	now := p.o.Now()
	for _, n := range ns {
		if n.Table != "" {
			p.hist.record(n.Table, now, n.FinalizedUntil, now, n.Rewound)
		}
	}
	return len(ns) > 0 || overflow
}
