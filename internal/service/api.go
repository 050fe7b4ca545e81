package service

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/finalizer-dev/finalizer/finalizer"
	"github.com/finalizer-dev/finalizer/listener"
	"github.com/finalizer-dev/finalizer/progress"
)

// uuidPattern is a query or run id as Spark prints it.
var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// CheckIDs refuses a query or run id (in lower case) that is not a UUID:
// events of such a run could never be accepted.
func CheckIDs(queryID, runID string) error {
	for _, x := range [][2]string{{"query id", queryID}, {"run id", runID}} {
		if !uuidPattern.MatchString(x[1]) {
			return fmt.Errorf("%s %q is not a UUID (8-4-4-4-12 hex digits, as Spark prints it)", x[0], x[1])
		}
	}
	return nil
}

// DefaultTrackTimeout is Options.TrackTimeout's default: well past what a
// healthy save and subscribe take, short enough that a stuck control
// database frees the request's handler.
const DefaultTrackTimeout = 30 * time.Second

// handleTrack serves `finalizer track`, within Options.TrackTimeout.
func (s *Service) handleTrack(ctx context.Context, r listener.TrackRequest) listener.TrackReply {
	timeout := s.opts.TrackTimeout
	if timeout <= 0 {
		timeout = DefaultTrackTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	spec, err := progress.ParseSpec(r.Spec)
	if err != nil {
		return listener.TrackReply{Error: err.Error()}
	}
	if r.QueryID == "" || r.RunID == "" || r.Table == "" {
		return listener.TrackReply{Error: "query id, run id and table are required"}
	}
	// Checked before anything is persisted: a track that can never receive
	// an event would otherwise fail again at every restart.
	r.QueryID, r.RunID = strings.ToLower(r.QueryID), strings.ToLower(r.RunID)
	if err := CheckIDs(r.QueryID, r.RunID); err != nil {
		return listener.TrackReply{Error: err.Error()}
	}
	ok, err := s.registry.Track(ctx, finalizer.Request{QueryID: r.QueryID, RunID: r.RunID, Table: r.Table, Spec: spec, Explicit: true})
	if err != nil {
		return listener.TrackReply{Error: err.Error()}
	}
	return listener.TrackReply{OK: true, Tracked: ok}
}

// handleJoin serves `finalizer join`.
func (s *Service) handleJoin(ctx context.Context, r listener.JoinRequest) listener.JoinReply {
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	res, err := s.registry.Join(ctx, r.RunID)
	if errors.Is(err, finalizer.ErrUnknownRun) {
		// The API answers from before the tracks are recovered: a run
		// not known yet may be one that recovery is about to resume.
		select {
		case <-s.recovered:
		case <-ctx.Done():
			return listener.JoinReply{} // not done within the timeout
		}
		res, err = s.registry.Join(ctx, r.RunID)
	}
	if err != nil {
		return listener.JoinReply{Error: err.Error()}
	}
	return listener.JoinReply{Done: res.Done, Stopped: res.Stopped, LastError: res.LastError, Note: res.Note}
}
