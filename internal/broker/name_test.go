package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/clock"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// A queue name is text without spaces, control or format characters: two
// names that look alike must be the same name, and none may change how
// the text after it is shown. Before, only ASCII spaces and controls were
// refused, so NBSP, NEL, U+2028, a zero-width space, a byte-order mark and
// a right-to-left override all made queues.
func TestQueueNameRule(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{})
	for _, tc := range []struct {
		name string
		bad  string // what the error names; empty: accepted
	}{
		{"orders.eu", ""},
		{"rapports-été", ""},
		{"注文/日本?x=1#2%41", ""},
		{"a*b✓", ""},
		{"a b", "U+0020"},
		{"a\tb", "U+0009"},
		{"a\x7fb", "U+007F"},
		{"a\u0085b", "U+0085"}, // NEL: a control and a space
		{"a\u00a0b", "U+00A0"}, // no-break space
		{"a\u1680b", "U+1680"}, // ogham space mark
		{"a\u2007b", "U+2007"}, // figure space
		{"a\u2028b", "U+2028"}, // line separator
		{"a\u2029b", "U+2029"}, // paragraph separator
		{"a\u3000b", "U+3000"}, // ideographic space
		{"a\u200bb", "U+200B"}, // zero-width space
		{"a\u200db", "U+200D"}, // zero-width joiner
		{"\ufeffa", "U+FEFF"},  // byte-order mark
		{"a\u00adb", "U+00AD"}, // soft hyphen
		{"a\u202eb", "U+202E"}, // right-to-left override
		{"a\u2066b", "U+2066"}, // left-to-right isolate
		{"a\u200fb", "U+200F"}, // right-to-left mark
		{"a\u061cb", "U+061C"}, // Arabic letter mark
		{"a\ufffdb", "U+FFFD"},
		{"a\xffb", "invalid UTF-8"},
		{"a\U000e0001b", "U+E0001"}, // language tag
	} {
		_, err := tb.b.Publish(&Message{Queue: tc.name})
		if tc.bad == "" {
			if err != nil {
				t.Errorf("Publish to %q: %v", tc.name, err)
			}
			continue
		}
		for what, err := range map[string]error{
			"Publish": err,
			"Declare": func() error { _, err := tb.b.Declare(tc.name, QueueConfig{}); return err }(),
			"Subscribe": func() error {
				c, err := tb.b.Subscribe(tc.name, "w", 1)
				if c != nil {
					c.Close()
				}
				return err
			}(),
		} {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%s %q: %v, want ErrInvalid naming %s", what, tc.name, err, tc.bad)
			}
		}
		if _, err := tb.b.Queue(tc.name); !errors.Is(err, ErrQueueNotFound) {
			t.Errorf("%q was made: %v", tc.name, err)
		}
	}
}

// A queue named under the old rule (a log written before the rule took in
// more than ASCII) recovers and keeps working while it exists: its jobs
// are published, recovered and consumed, and it may be declared again.
// Once deleted, the name is refused like any other.
func TestQueueNamedBeforeTheRuleRecovers(t *testing.T) {
	t.Parallel()
	const old = "rapports\u00a0été"
	st := store.NewMemory()
	cfg, err := json.Marshal(QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(&store.Record{Kind: store.KindDeclare, Queue: old, Data: cfg}); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := durable(t, st, clk, Config{})
	if _, err := b.Publish(&Message{Queue: old, Payload: []byte("1")}); err != nil {
		t.Fatalf("publish to a queue named before the rule: %v", err)
	}
	crash(b)
	b = durable(t, st, clk, Config{})
	defer b.Shutdown(t.Context())
	if n := ready(t, b, old); n != 1 {
		t.Fatalf("%d jobs recovered, want 1", n)
	}
	if _, err := b.Declare(old, QueueConfig{MaxAttempts: 3}); err != nil {
		t.Fatalf("declaring it again: %v", err)
	}
	if _, err := b.DeleteQueue(old, true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(&Message{Queue: old}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("%U", '\u00a0')) {
		t.Fatalf("a publish after the delete: %v, want the name refused", err)
	}
}
