package listener_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/finalizer-dev/finalizer/listener"
)

// A server before nats-server 2.12 in strict mode refuses a stream
// configuration with persist_mode, a field it does not know: EnsureStream
// creates the stream again without it (each message written, as every
// stream was before) instead of failing, so the service still starts
// against such a server. The server is a plain one whose JetStream API is
// answered by the test as that server would.
func TestEnsureStreamOnAServerWithoutPersistMode(t *testing.T) {
	url := startPlainNATS(t)
	api := rawConn(t, url)
	var (
		mu      sync.Mutex
		creates []string
	)
	reply := func(m *nats.Msg, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Error(err)
			return
		}
		_ = m.Respond(b)
	}
	sub, err := api.Subscribe("$JS.API.>", func(m *nats.Msg) {
		switch {
		case m.Subject == "$JS.API.INFO":
			reply(m, map[string]any{"type": "io.nats.jetstream.api.v1.account_info_response"})
		case strings.HasPrefix(m.Subject, "$JS.API.STREAM.INFO."):
			reply(m, map[string]any{"type": "io.nats.jetstream.api.v1.stream_info_response",
				"error": map[string]any{"code": 404, "err_code": 10059, "description": "stream not found"}})
		case strings.HasPrefix(m.Subject, "$JS.API.STREAM.CREATE."):
			mu.Lock()
			creates = append(creates, string(m.Data))
			mu.Unlock()
			if strings.Contains(string(m.Data), `"persist_mode"`) {
				reply(m, map[string]any{"type": "io.nats.jetstream.api.v1.stream_create_response",
					"error": map[string]any{"code": 400, "err_code": 10025, "description": `invalid JSON: json: unknown field "persist_mode"`}})
				return
			}
			var cfg jetstream.StreamConfig
			if err := json.Unmarshal(m.Data, &cfg); err != nil {
				t.Error(err)
			}
			reply(m, map[string]any{"type": "io.nats.jetstream.api.v1.stream_create_response",
				"config": cfg, "created": time.Now().UTC(), "state": map[string]any{}})
		default:
			reply(m, map[string]any{"error": map[string]any{"code": 404, "err_code": 10000, "description": "not here"}})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := api.Flush(); err != nil {
		t.Fatal(err)
	}
	l := dial(t, url, listener.Options{})
	if err := l.EnsureStream(ctxT(t)); err != nil {
		t.Fatalf("EnsureStream: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(creates) != 2 || !strings.Contains(creates[0], `"persist_mode"`) || strings.Contains(creates[1], `"persist_mode"`) {
		t.Fatalf("creates %q: want one with persist_mode, then one without", creates)
	}
}
