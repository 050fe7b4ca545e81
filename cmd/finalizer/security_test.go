package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestIsLoopback(t *testing.T) {
	for listen, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.2:1": true, "[::1]:8080": true, "localhost:8080": true, "LOCALHOST:1": true,
		"0.0.0.0:8080": false, ":8080": false, "[::]:8080": false, "10.1.2.3:8080": false, "example.com:80": false, "garbage": false,
	} {
		if got := isLoopback(listen); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", listen, got, want)
		}
	}
}

func TestExposureRefusedWithoutCredentials(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		config string
		err    string // "" = accepted
	}{
		{"loopback defaults", nil, "", ""},
		{"http on all interfaces", []string{"--http-listen", "0.0.0.0:8080"}, "", "--http-token"},
		{"http with a token", []string{"--http-listen", "0.0.0.0:8080", "--http-token", "s3cret"}, "", ""},
		{"http insecure", []string{"--http-listen", "0.0.0.0:8080", "--http-insecure"}, "", ""},
		{"http off", []string{"--http-listen", "off"}, "", ""},
		{"nats on all interfaces", []string{"--nats-listen", "0.0.0.0:4222"}, "", "nats.embedded.users"},
		{"nats anonymous allowed", []string{"--nats-listen", "0.0.0.0:4222", "--nats-allow-anonymous"}, "", ""},
		{"nats without a host (127.0.0.1)", []string{"--nats-listen", ":4222"}, "", ""},
		{"nats external", []string{"--nats-listen", "0.0.0.0:4222", "--nats-url", "nats://nats:4222"}, "", ""},
		{"nats with users", []string{"--nats-listen", "0.0.0.0:4222"}, `
nats:
  embedded:
    users:
      - {user: spark, password: x, role: publisher}
`, ""},
		{"bad role", nil, `
nats:
  embedded:
    users:
      - {user: spark, password: x, role: superuser}
`, `role "superuser"`},
		{"user without password", nil, `
nats:
  embedded:
    users:
      - {user: spark, role: publisher}
`, "set user and password, or nkey"},
		{"the service's own name", nil, `
nats:
  embedded:
    users:
      - {user: finalizer-service, password: x, role: admin}
`, "the service's own"},
		{"tls without a key", nil, `
nats:
  embedded:
    tls: {cert_file: server.pem}
`, "cert_file and key_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.config != "" {
				args = append(args, "--config", writeConfig(t, tc.config))
			}
			_, err := resolveServe(t, args...)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want one naming %q", err, tc.err)
			}
		})
	}
}

func TestRolePermissions(t *testing.T) {
	pub := rolePermissions(RolePublisher, "acme.spark", "finalizer.api", "SPARK_EVENTS")
	if len(pub.Publish) != 1 || pub.Publish[0] != "acme.spark.>" || len(pub.Subscribe) != 0 {
		t.Errorf("publisher = %+v, want publish acme.spark.> only", pub)
	}
	op := rolePermissions(RoleOperator, "spark", "ops.api", "EV")
	if !strings.Contains(strings.Join(op.Publish, " "), "ops.api.>") || !strings.Contains(strings.Join(op.Publish, " "), "$JS.API.STREAM.INFO.EV") ||
		strings.Join(op.Subscribe, " ") != "_INBOX.>" {
		t.Errorf("operator = %+v", op)
	}
	if rolePermissions(RoleAdmin, "spark", "finalizer.api", "SPARK_EVENTS") != nil {
		t.Error("admin is restricted")
	}
	users, user, password, err := embeddedAuth(Config{Prefix: "spark", NATS: NATSConfig{APIPrefix: "finalizer.api",
		Embedded: EmbeddedNATSConfig{Users: []EmbeddedUserConfig{{User: "spark", Password: "x", Role: RolePublisher}}}}})
	if err != nil || len(users) != 2 || user != serviceUser || len(password) < 32 || users[0].Password != password || users[0].Permissions != nil {
		t.Fatalf("embeddedAuth = %+v %q %v", users, user, err)
	}
}

func TestRequireToken(t *testing.T) {
	h := requireToken("s3cret", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/v1/tables", "", http.StatusUnauthorized},
		{"/v1/tables", "Bearer wrong", http.StatusUnauthorized},
		{"/v1/tables", "Bearer s3cret", http.StatusTeapot},
		{"/v1/tables", "Basic s3cret", http.StatusUnauthorized},
		{"/v1/tables", "Bearer s3cret2", http.StatusUnauthorized},
		{"/metrics", "", http.StatusUnauthorized},
		{"/healthz", "", http.StatusTeapot},
		{"/readyz", "", http.StatusTeapot},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s with %q: %d, want %d", tc.path, tc.auth, rec.Code, tc.want)
		}
		if rec.Code == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.path)
		}
	}
}
