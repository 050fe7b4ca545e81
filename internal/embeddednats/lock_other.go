//go:build !unix

package embeddednats

import (
	"fmt"
	"os"
)

// lockStoreDir creates dir if needed. Without flock the store directory is
// not protected against a second server.
func lockStoreDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded nats: create store dir: %w", err)
	}
	return func() {}, nil
}
