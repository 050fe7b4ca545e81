package main

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger returns the service's logger: JSON lines (or console text for
// humans) on w, at the given level.
func newLogger(c LogConfig, w io.Writer) (*zap.Logger, error) {
	level := zapcore.InfoLevel
	if c.Level != "" {
		if err := level.Set(c.Level); err != nil {
			return nil, fmt.Errorf("log level %q: want debug, info, warn or error", c.Level)
		}
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "ts"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	encCfg.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	switch c.Format {
	case "", "json":
		enc = zapcore.NewJSONEncoder(encCfg)
	case "console":
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, fmt.Errorf("log format %q: want json or console", c.Format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core, zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))), nil
}
