package redact

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestURLs(t *testing.T) {
	const secret = "s3cret"
	cases := []string{
		"nats://u:s3cret@127.0.0.1:4222",
		"nats://s3cret@127.0.0.1:4222",
		"nats://s3cret@a:1,nats://u:s3cret@b:2",
		"nats://u:s3cret%zz@127.0.0.1:1",
		"nats://s3cret tok@127.0.0.1:1",
		"s3cret@127.0.0.1:1",
		"tls://u:s3cret@[::1:1",
		"postgres://u:s3cret@db/ops?sslmode=disable",
		"postgres://db/ops?password=s3cret&sslmode=disable",
		"postgres://db/ops?password=s3cret&sslmode=%zz",
		"host=db password=s3cret",
		"http://u:s3cret@127.0.0.1:8080",
	}
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			got := URLs(c)
			if strings.Contains(got, secret) {
				t.Fatalf("URLs(%q) = %q", c, got)
			}
			err := Error(fmt.Errorf("connect to %s: parse %q: %w", c, c, errors.ErrUnsupported), c)
			if strings.Contains(err.Error(), secret) || !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("Error: %v", err)
			}
		})
	}
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                      "nats://127.0.0.1:4222",
		"nats://u:pw@h:1":                            "nats://u:xxxxx@h:1",
		"nats://tok@h:1":                             "nats://xxxxx@h:1",
		"postgres://h/db?sslmode=disable":            "postgres://h/db?sslmode=disable",
		"postgres://h/db?password=x&sslmode=disable": "postgres://h/db?password=xxxxx&sslmode=disable",
	} {
		if got := URLs(in); got != want {
			t.Errorf("URLs(%q) = %q, want %q", in, got, want)
		}
	}
}
