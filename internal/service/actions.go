package service

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/finalizer-dev/finalizer/control"
	"github.com/finalizer-dev/finalizer/internal/actions"
	"github.com/finalizer-dev/finalizer/listener"
)

// startActions records which tables have actions (always: a config
// without actions stops the trigger's outbox writes of an earlier one),
// and, when a rule has actions, starts the dispatcher that expands the
// outbox's moves into events and delivers them (issue 19), woken by every
// announced move.
func (s *Service) startActions(ctx context.Context) error {
	ob, err := control.OpenOutbox(ctx, s.pgURL, control.OutboxOptions{
		Table: s.opts.ControlTable, MaxConns: actions.Connections(s.opts.Actions), Logger: s.log.Named("actions"),
	})
	if err != nil {
		return fmt.Errorf("actions: %w", err)
	}
	s.outbox = ob
	s.started("actions outbox", func(context.Context) { ob.Close() })
	if err := ob.SetActionTables(ctx, actions.Patterns(s.opts.Actions)); err != nil {
		return fmt.Errorf("actions: record the tables with actions: %w", err)
	}
	if len(actions.Patterns(s.opts.Actions)) == 0 {
		return nil
	}
	var pub actions.Publisher
	for _, r := range s.opts.Actions {
		for _, a := range r.Actions {
			if a.Kind == actions.KindNATS && pub == nil {
				if !s.jetstream {
					return errors.New("actions: a nats action needs JetStream, and the NATS server has none")
				}
				if err := s.bus.EnsureFinalStream(ctx); err != nil {
					return fmt.Errorf("actions: %w", err)
				}
				pub = s.bus
			}
		}
	}
	d, err := actions.Start(actions.Options{
		Outbox: ob, Rules: s.opts.Actions, Publisher: pub, SubjectPrefix: s.bus.FinalPrefix(),
		Logger: s.log.Named("actions"), Registerer: s.prom, PollInterval: s.opts.ActionsPollInterval,
	})
	if err != nil {
		return fmt.Errorf("actions: %w", err)
	}
	s.dispatcher = d
	s.started("actions dispatcher", func(context.Context) { d.Close() })
	stop, err := s.store.Watch(func(control.Notification) { d.Wake() })
	if err != nil {
		return fmt.Errorf("actions: watch the control database: %w", err)
	}
	s.started("actions watch", func(context.Context) { stop() })
	d.Wake()
	s.log.Info("actions started", zap.Int("rules", len(actions.Patterns(s.opts.Actions))))
	return nil
}

// Outbox returns the actions' outbox (nil before the start).
func (s *Service) Outbox() *control.Outbox { return s.outbox }

// Dispatcher returns the actions' dispatcher, nil without actions.
func (s *Service) Dispatcher() *actions.Dispatcher { return s.dispatcher }

var _ actions.Publisher = (*listener.Listener)(nil)
