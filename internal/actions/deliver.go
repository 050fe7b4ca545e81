package actions

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Message is one event for the NATS action.
type Message struct {
	Subject string
	// ID is the event's id, sent as the JetStream message id
	// (Nats-Msg-Id), so the stream drops a duplicate within its
	// duplicate window.
	ID   string
	Data []byte
}

// Publisher publishes events through JetStream (listener.Listener). It
// returns one error per message, nil when the stream acknowledged it.
type Publisher interface {
	PublishFinal(ctx context.Context, msgs []Message) []error
}

// MarkerWriter writes one marker. The local file system's (WriteFile) is
// the one built in; an object store would plug in here: its
// implementation puts the object under the key the path template gives
// (a PUT is atomic there: a reader sees the whole object or none) and is
// selected by a new action kind (e.g. `object_marker: {url:
// s3://bucket/{table}/{period}/_SUCCESS}`) whose Build checks the bucket
// at start as a marker checks its directory.
type MarkerWriter interface {
	WriteMarker(ctx context.Context, path string, body []byte) error
	// RemoveMarker withdraws the marker at path (a rewind took its period
	// back): none there is no error.
	RemoveMarker(ctx context.Context, path string) error
}

// FileMarkers writes markers to the local file system, atomically.
type FileMarkers struct{}

// WriteMarker writes body to path atomically: a temporary file in the
// same directory, written and fsynced, renamed over path, then the
// directory fsynced, so a reader sees no file or the whole file, and a
// crash after it returns keeps it. Missing directories are created.
func (FileMarkers) WriteMarker(_ context.Context, path string, body []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(body); err == nil {
		if err = f.Chmod(defaultMarkerPermission); err == nil {
			err = f.Sync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// RemoveMarker removes the marker at path, then fsyncs its directory, so
// that no reader finds a period final that a rewind took back; a missing
// marker is no error (delivered at least once).
func (FileMarkers) RemoveMarker(_ context.Context, path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// post sends one event to a webhook, signed: the signature header is
// "sha256=" and the hex HMAC-SHA256, keyed with the secret, of the
// timestamp header's value, a dot, and the body.
func (t *webhookTarget) post(ctx context.Context, client *http.Client, id string, body []byte, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	ts := strconv.FormatInt(now.Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("POST %s: %w", t.shown, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "finalizer")
	req.Header.Set(DefaultEventIDHeader, id)
	req.Header.Set(DefaultTimestampHeader, ts)
	req.Header.Set(DefaultSignatureHeader, Sign(t.secret, ts, body))
	resp, err := client.Do(req)
	if err != nil {
		// *url.Error repeats the whole URL, which may hold a token in its
		// query: say the shown one.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("POST %s: %w", t.shown, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("POST %s: HTTP %d", t.shown, resp.StatusCode)
	}
	return nil
}

// Sign returns the signature header's value of body sent at timestamp
// (Unix seconds, as sent in the timestamp header): "sha256=" and the hex
// HMAC-SHA256 of timestamp + "." + body.
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte("."))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// ErrBadSignature is returned by Verify.
var ErrBadSignature = errors.New("bad webhook signature")

// Verify checks a received webhook: the signature over timestamp and
// body, in constant time, and a timestamp within tolerance of now (a
// replayed old request fails). Receivers in Go may use it; the README
// shows the same check in Python.
func Verify(secret []byte, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q", ErrBadSignature, timestamp)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp %s is %s away", ErrBadSignature, timestamp, d)
	}
	if !hmac.Equal([]byte(Sign(secret, timestamp, body)), []byte(signature)) {
		return ErrBadSignature
	}
	return nil
}

// after returns the wait before the attempt that follows attempt failed
// ones (1: after the first failure), from backoff/v4's exponential
// backoff (doubling, randomized by ±50%, capped at the max interval).
func (p retryPolicy) after(attempts int) time.Duration {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.initial),
		backoff.WithMaxInterval(p.max),
		backoff.WithMaxElapsedTime(0),
	)
	d := b.NextBackOff()
	for i := 1; i < attempts; i++ {
		d = b.NextBackOff()
	}
	return d
}
