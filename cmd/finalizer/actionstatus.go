package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/finalizer-dev/finalizer/control"
)

// actionStuckAfter is how old a table's oldest pending event may be
// before status calls its action stuck (an event that failed is stuck at
// once).
const actionStuckAfter = 2 * time.Minute

// actionStatus is one action's backlog for a table in tableStatus: what
// waits, why, and what was given up on. Action "" is the moves that were
// committed and not yet expanded into events.
type actionStatus struct {
	Action          string    `json:"action"`         // the action's key (kind:hash), "" for the outbox
	Name            string    `json:"name,omitempty"` // its name in the config, when the service says
	Pending         int       `json:"pending"`
	OldestPendingAt time.Time `json:"oldest_pending_at,omitzero"` // the move time of the oldest pending event
	Attempts        int       `json:"attempts,omitempty"`         // of the oldest pending event
	LastError       string    `json:"last_error,omitempty"`
	NextAttemptAt   time.Time `json:"next_attempt_at,omitzero"`
	Dead            int       `json:"dead,omitempty"` // dead-lettered events kept
	// Stuck says the table's announcements are not getting through: the
	// oldest pending event failed, or waited longer than 2 minutes.
	Stuck bool `json:"stuck"`
}

// attachActions adds each table's action backlogs to its status; names
// maps action keys to their config names (nil: unknown).
func attachActions(tables []tableStatus, bs []control.Backlog, names map[string]string, now time.Time) {
	idx := map[string]int{}
	for i, t := range tables {
		idx[t.Table] = i
	}
	for _, b := range bs {
		i, ok := idx[b.Table]
		if !ok {
			continue
		}
		a := actionStatus{Action: b.Action, Name: names[b.Action], Pending: b.Pending, OldestPendingAt: b.OldestMovedAt,
			Attempts: b.Attempts, LastError: b.LastError, NextAttemptAt: b.NextAt, Dead: b.Dead}
		a.Stuck = b.Pending > 0 && (b.Attempts > 0 || now.Sub(b.OldestMovedAt) > actionStuckAfter)
		tables[i].Actions = append(tables[i].Actions, a)
	}
}

// printActions prints the actions that are stuck or have dead letters.
func printActions(w io.Writer, tables []tableStatus) {
	for _, t := range tables {
		for _, a := range t.Actions {
			name := a.Action
			if a.Name != "" {
				name = a.Name + " (" + a.Action + ")"
			}
			switch {
			case a.Action == "" && a.Stuck:
				fmt.Fprintf(w, "\nACTIONS STUCK %s: %d moves committed since %s and not announced: is a service with this table's actions running (its log says why)?\n",
					t.Table, a.Pending, a.OldestPendingAt.Format(time.RFC3339))
			case a.Stuck:
				var why []string
				if a.Attempts > 0 {
					why = append(why, fmt.Sprintf("%d attempts", a.Attempts))
				}
				if a.LastError != "" {
					why = append(why, "last error: "+a.LastError)
				}
				if !a.NextAttemptAt.IsZero() {
					why = append(why, "next attempt "+a.NextAttemptAt.Format(time.RFC3339))
				}
				fmt.Fprintf(w, "\nACTION STUCK %s %s: %d events pending since %s; %s\n", t.Table, name, a.Pending,
					a.OldestPendingAt.Format(time.RFC3339), strings.Join(why, "; "))
			}
			if a.Dead > 0 {
				fmt.Fprintf(w, "\nACTION %s %s: %d events dead-lettered (state 'dead' in the control table's _sends table; set it back to 'pending' to retry)\n",
					t.Table, name, a.Dead)
			}
		}
	}
}
