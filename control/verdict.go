package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"time"
)

// Advance is one request to move a feeder's watermark, and with it its
// table's verdict, forward.
type Advance struct {
	Table          string          // the tracked table's name, as configured
	FinalizedUntil time.Time       // the candidate: every period ending at or before it is complete
	EndTime        time.Time       // the time read from the progress
	EndOffset      json.RawMessage // that source's endOffset; nil is stored as SQL NULL
	// QueryID is the query that wrote the data: the feeder whose watermark
	// moves (ADR 0015). Advances without one share the feeder "".
	QueryID   string
	QueryName string // the query's name, "" when it has none; resolves an expected feeder of that name
	RunID     string // provenance
	BatchID   int64  // provenance
	// Sources are the descriptions of the progress's sources, in Spark's
	// order (provenance: which source an index meant when the verdict
	// moved); nil is stored as SQL NULL.
	Sources []string
	// Guard is the table's rewind the sender knew of when it decided on
	// this advance (see RewindGuard and KnownRewind): the statement moves
	// nothing for it when the table was rewound since (its rewound_at is
	// later), and its result is ErrBeforeRewind. The zero value guards
	// nothing, for callers that judge no progress against rewinds (the
	// bench's naive peer, tests, the CLI); a tracker always sets it,
	// through KnownRewind, even when it knows of no rewind.
	Guard RewindGuard

	// detached: made by Detached or DetachedLike, so that a second
	// Detached returns it as it is (a tracker detaches its advance once;
	// ownership's held copy and the tracker's last write share it).
	detached bool
}

// Detached returns a copy of a that shares no memory with the progress
// it was made from. Its end offset is a slice of the parsed document's
// buffer of every offset, and its source descriptions are slices of the
// block that holds all of the document's strings: an advance kept after
// its statement (a tracker's last write, a held advance) would keep them
// alive whole, about a kilobyte per tracked run (issue 12). An advance
// Detached (or DetachedLike) returned is returned as it is, without a copy.
func (a Advance) Detached() Advance { return a.DetachedLike(nil) }

// DetachedLike is Detached, except that the ids and source descriptions
// equal to like's (an advance detached already: a tracker's last one, or
// one holding the tracker's own ids) are like's, not copies: a tracker's
// advances of one run have the same ids and most often the same sources,
// so that each allocates only its end offset, and what a tracked run keeps
// of its last write is shared with ownership's held copy (issue 12).
func (a Advance) DetachedLike(like *Advance) Advance {
	if a.detached {
		return a
	}
	a.detached = true
	a.EndOffset = bytes.Clone(a.EndOffset)
	switch {
	case a.Sources == nil:
	case like != nil && slices.Equal(a.Sources, like.Sources):
		a.Sources = like.Sources
	default:
		srcs := make([]string, len(a.Sources))
		for i, s := range a.Sources {
			srcs[i] = strings.Clone(s)
		}
		a.Sources = srcs
	}
	// The ids come from the document too; the table and the query's name
	// from the tracker's configuration, which lives as long anyway.
	var likeQuery, likeRun string
	if like != nil {
		likeQuery, likeRun = like.QueryID, like.RunID
	}
	a.QueryID, a.RunID = sameOrClone(a.QueryID, likeQuery), sameOrClone(a.RunID, likeRun)
	return a
}

// RewindGuard is the rewind of its table an advance's sender knew of
// (ADR 0019, addendum of 2026-12-06). Its zero value is "no guard": the
// advance moves as it always did. KnownRewind makes a guard, and a
// guard made from the zero time is not the zero value: it means "knew
// of no rewind", and any rewind of the table refuses the advance. So a
// tracker that never heard of a rewind cannot skip the check by
// accident (a zero time read from an empty map is still a guard); only a
// caller that writes no guard at all skips it. It is one word, kept with
// the advance a tracker and ownership hold per run.
type RewindGuard struct {
	// k is 0 for no guard, noRewind for a guard that knew of no rewind,
	// else the known rewind's rewound_at in Unix microseconds
	// (PostgreSQL's precision). A rewind at exactly the Unix epoch,
	// which a rewind's now() never gives, is kept as one microsecond
	// before it.
	k int64
}

// KnownRewind is the guard of an advance decided on when its table's last
// rewind known to the sender was at (the table's rewound_at as the control
// table stores it: from a read of the row, a rewind's notification, a
// refused advance's row); the zero time when it knew of none. The
// statement refuses the advance when the table's rewound_at is later.
func KnownRewind(at time.Time) RewindGuard {
	if at.IsZero() {
		return RewindGuard{k: noRewind}
	}
	us := at.UnixMicro()
	if us == 0 {
		us = -1
	}
	return RewindGuard{k: us}
}

// noRewind is the k of a guard that knew of no rewind.
const noRewind = math.MinInt64

// Guarded reports whether g guards its advance (made by KnownRewind).
func (g RewindGuard) Guarded() bool { return g.k != 0 }

// Known returns the rewind g knew of, UTC; zero when it knew of none or
// does not guard.
func (g RewindGuard) Known() time.Time {
	if g.k == 0 || g.k == noRewind {
		return time.Time{}
	}
	return time.UnixMicro(g.k).UTC()
}

// Refuses reports whether a table rewound at rewoundAt (zero: never)
// refuses an advance guarded by g: the table was rewound after what g
// knew. It is the statements' check, for a fake of the store.
func (g RewindGuard) Refuses(rewoundAt time.Time) bool {
	return g.k != 0 && !rewoundAt.IsZero() && (g.k == noRewind || rewoundAt.UnixMicro() > g.k)
}

// sqlTime is g as the statements take it: nil (SQL NULL) when g guards
// nothing, else the known time; a guard that knew of no rewind is sent
// as year 1, before any rewound_at (now() of a rewind's transaction).
// Each statement moves nothing for a row whose rewound_at > it (NULL
// compares as not refused).
func (g RewindGuard) sqlTime() *time.Time {
	if g.k == 0 {
		return nil
	}
	t := beforeAnyRewind
	if g.k != noRewind {
		t = time.UnixMicro(g.k).UTC()
	}
	return &t
}

// beforeAnyRewind is the time a guard that knew of no rewind is sent as.
var beforeAnyRewind = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)

// later reports whether g knows of a later rewind than o (a guard that
// guards nothing counts as the latest: it is never refused), for the
// choice of one advance per feeder of a table in a batch.
func (g RewindGuard) later(o RewindGuard) bool {
	switch {
	case g.k == 0 || o.k == 0:
		return g.k == 0 && o.k != 0
	default:
		return g.k > o.k
	}
}

// sameOrClone returns like when it equals s, else a copy of s.
func sameOrClone(s, like string) string {
	if s == like {
		return like
	}
	return strings.Clone(s)
}

// Verdict is a table's row in the control table, as it stands.
type Verdict struct {
	Table          string
	FinalizedUntil time.Time // UTC
	EndTime        time.Time // UTC; zero when NULL
	EndOffset      json.RawMessage
	QueryID        string
	RunID          string
	BatchID        int64
	Sources        []string  // the sources' descriptions at the last move; nil when unknown
	UpdatedAt      time.Time // UTC: when the verdict last moved

	// Mark is the first sign, since the last rewind or acknowledgement,
	// that the table's history changed under its verdict (see Store.Mark);
	// "" when there is none. MarkedAt is when it was recorded, Marks how
	// many signs were recorded since.
	Mark     string
	MarkedAt time.Time // UTC; zero without a mark
	Marks    int64
	// RewoundAt is when an operator last moved the verdict back (see
	// Store.Rewind); zero when never.
	RewoundAt time.Time
}

// Track is an explicit track request persisted so that it survives a
// restart of the service. Spec is opaque to this package.
type Track struct {
	QueryID   string
	RunID     string
	Table     string
	Spec      json.RawMessage
	CreatedAt time.Time
	// DoneAt is when the run's tracker finished (after termination); zero
	// while the run is still tracked.
	DoneAt time.Time
}

// The errors this package returns, wrapped with context. Callers test them
// with errors.Is.
var (
	// ErrNotFound means the table has no row (no verdict yet).
	ErrNotFound = errors.New("no verdict for table")
	// ErrInvalidName means a control-table name is not a valid
	// [schema.]identifier.
	ErrInvalidName = errors.New("invalid control table name")
	// ErrSchemaTooNew means the database was migrated by a newer finalizer
	// than this binary; this binary refuses to touch it.
	ErrSchemaTooNew = errors.New("control table schema is newer than this binary")
	// ErrNotMigrated means the control table does not exist or is behind this
	// binary and migrations were not run (serve --no-migrate).
	ErrNotMigrated = errors.New("control table schema is not migrated")
	// ErrUnavailable means PostgreSQL could not be reached or the connection
	// broke; the operation may succeed if retried.
	ErrUnavailable = errors.New("postgresql unavailable")
	// ErrInvalidTable means a tracked table's name cannot be stored (see
	// CheckTableName); nothing was sent to PostgreSQL.
	ErrInvalidTable = errors.New("invalid table name")
	// ErrInvalidAdvance means an Advance lacks a table or a time, its
	// table name is invalid (it then wraps ErrInvalidTable too), or its
	// EndOffset is not JSON; nothing was written.
	ErrInvalidAdvance = errors.New("invalid advance")
	// ErrInvalidTrack means a Track lacks its query id, run id or table, or
	// its Spec is not JSON; nothing was written.
	ErrInvalidTrack = errors.New("invalid track")
	// ErrBeforeRewind means an advance guarded by the rewind its sender
	// knew (Advance.Guard) was refused: the table was rewound since. It
	// moved nothing; the result's Verdict is the table's row as the
	// statement read it, its RewoundAt the rewind that refused it. The
	// sender drops the advance (it was decided before that rewind and
	// would undo it) and learns the rewind; retrying it is refused again.
	ErrBeforeRewind = errors.New("advance decided before the table's last rewind (it would undo the rewind); not applied")
	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("control store is closed")
)
