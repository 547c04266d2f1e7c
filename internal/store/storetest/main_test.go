package storetest

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: a store's flusher, a client's
// connection, a watcher.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
