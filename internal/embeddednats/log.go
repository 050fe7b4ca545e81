package embeddednats

import (
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// zapLogger implements nats-server's Logger interface on zap. Notices (the
// 25-line start banner, "Server is ready", ...) are debug: the service logs
// its own one line when the server is ready. Traces are debug (and only enabled with debug), and a fatal error is
// logged as an error and remembered instead of exiting the process.
type zapLogger struct {
	log *zap.Logger

	mu       sync.Mutex
	firstErr string
}

func (z *zapLogger) Noticef(format string, v ...any) { z.log.Debug(sprintf(format, v)) }
func (z *zapLogger) Warnf(format string, v ...any)   { z.log.Warn(sprintf(format, v)) }
func (z *zapLogger) Errorf(format string, v ...any)  { z.log.Error(sprintf(format, v)) }
func (z *zapLogger) Debugf(format string, v ...any)  { z.log.Debug(sprintf(format, v)) }
func (z *zapLogger) Tracef(format string, v ...any)  { z.log.Debug(sprintf(format, v)) }

// Fatalf logs at error level and records the message: nats-server calls it
// for errors it cannot recover from (a port in use, JetStream that cannot
// start), and Start reports the first one.
func (z *zapLogger) Fatalf(format string, v ...any) {
	msg := sprintf(format, v)
	z.log.Error(msg, zap.Bool("fatal", true))
	z.mu.Lock()
	if z.firstErr == "" {
		z.firstErr = msg
	}
	z.mu.Unlock()
}

// fatal returns the first fatal message, or "".
func (z *zapLogger) fatal() string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.firstErr
}

func sprintf(format string, v []any) string {
	return strings.TrimSpace(fmt.Sprintf(format, v...))
}
