package broker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// Health says what a failed disk does to the broker: once the log
// refuses writes every publish is refused, and Health says so, with the
// disk's own error, instead of reporting a broker that takes work.
func TestHealthReportsAFailedLog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault string
		fail  func(*store.FaultFS)
		want  string // in the reason
	}{
		{"fsync", func(f *store.FaultFS) { f.FailSync(true) }, "input/output error"},
		{"full disk", func(f *store.FaultFS) { f.FailWrite(true) }, "no space left on device"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			ffs := &store.FaultFS{}
			st, err := store.OpenFile(t.TempDir(), store.FileOptions{FS: ffs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			b := durable(t, st, clk, Config{})
			if _, err := b.Publish(&Message{Queue: "q", Payload: []byte("a")}); err != nil {
				t.Fatal(err)
			}
			if h := b.Health(); !h.OK() || h.Reason() != "" {
				t.Fatalf("a sound broker: %+v, %q", h, h.Reason())
			}
			tc.fail(ffs)
			if _, err := b.Publish(&Message{Queue: "q", Payload: []byte("b")}); !errors.Is(err, ErrNotDurable) {
				t.Fatalf("a publish the disk refused: %v", err)
			}
			h := b.Health()
			if h.OK() || h.Draining || !strings.Contains(h.StoreError, tc.want) || !strings.Contains(h.Reason(), tc.want) {
				t.Fatalf("after the disk failed: %+v, %q; want not OK, saying %q", h, h.Reason(), tc.want)
			}
			// The log stays failed: publishes go on being refused, and
			// Health goes on saying so.
			if _, err := b.Publish(&Message{Queue: "q", Payload: []byte("c")}); !errors.Is(err, ErrNotDurable) {
				t.Fatalf("a publish after the failure: %v", err)
			}
			if h := b.Health(); h.OK() {
				t.Fatalf("a second look: %+v", h)
			}
			_ = b.Shutdown(context.Background())
			if h := b.Health(); !h.Draining || h.OK() || !strings.HasPrefix(h.Reason(), "draining") {
				t.Fatalf("after Shutdown: %+v, %q", h, h.Reason())
			}
		})
	}
}

// A broker without a log is healthy until it drains.
func TestHealthInMemory(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	if h := tb.b.Health(); !h.OK() {
		t.Fatalf("%+v", h)
	}
	_ = tb.b.Shutdown(context.Background())
	if h := tb.b.Health(); h.OK() || h.Reason() != "draining" {
		t.Fatalf("after Shutdown: %+v, %q", h, h.Reason())
	}
}
