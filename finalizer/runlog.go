package finalizer

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// runLog is a tracker's logger: the registry's, with the run's fields
// (table, query_id, run_id) added to each line as it is written. A
// zap.Logger.With per tracker would hold those fields encoded in a copy of
// the encoder (with the JSON or console encoder, a buffer of 1 KiB or
// more) for every tracked run, whether it ever logs or not: about a
// kilobyte per run at 100,000 runs (issue 12).
type runLog struct {
	base *zap.Logger
	cfg  *trackerCfg
}

// enabled says whether a line at lvl would be written.
func (l runLog) enabled(lvl zapcore.Level) bool { return l.base.Core().Enabled(lvl) }

// log writes msg at lvl with fields and the run's fields.
func (l runLog) log(lvl zapcore.Level, msg string, fields []zap.Field) {
	if ce := l.base.Check(lvl, msg); ce != nil {
		ce.Write(append(fields, zap.String("table", l.cfg.Table), zap.String("query_id", l.cfg.QueryID), zap.String("run_id", l.cfg.RunID))...)
	}
}

func (l runLog) Debug(msg string, fields ...zap.Field) { l.log(zapcore.DebugLevel, msg, fields) }
func (l runLog) Info(msg string, fields ...zap.Field)  { l.log(zapcore.InfoLevel, msg, fields) }
func (l runLog) Warn(msg string, fields ...zap.Field)  { l.log(zapcore.WarnLevel, msg, fields) }
func (l runLog) Error(msg string, fields ...zap.Field) { l.log(zapcore.ErrorLevel, msg, fields) }
