package sdk_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/harbinger-mq/harbinger/internal/sched"
	"github.com/harbinger-mq/harbinger/internal/text"
	"github.com/harbinger-mq/harbinger/internal/tlscheck"
	"github.com/harbinger-mq/harbinger/rabbitmq"
)

// The client module keeps copies of two broker rules and checks them
// against ../../client/testdata/rules.json; this checks the same file
// against the broker's rules, so that the copies cannot drift apart.
func TestClientRulesFileMatchesBroker(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../client/testdata/rules.json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		MaxReason int
		Reasons   []struct{ In, Out []byte }
		Hints     []struct {
			Why  []byte
			TLS  bool
			Hint bool
		}
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Reasons) == 0 || len(r.Hints) == 0 {
		t.Fatal("rules.json has no cases")
	}
	for _, c := range r.Reasons {
		if got := text.Clean(string(c.In), r.MaxReason); got != string(c.Out) {
			t.Errorf("text.Clean(%.20q..., %d) = %.20q..., rules.json says %.20q...", c.In, r.MaxReason, got, c.Out)
		}
	}
	for _, c := range r.Hints {
		if got := tlscheck.Mismatch(string(c.Why), c.TLS); got != c.Hint {
			t.Errorf("tlscheck.Mismatch(%q, %v) = %v, rules.json says %v", c.Why, c.TLS, got, c.Hint)
		}
	}
}

// rabbitmq.Local cuts the names of its keys as the broker cuts key names
// (internal/text at rabbitmq.MaxNameLen).
func TestRabbitMQKeyNamesAgreeWithText(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"web",
		strings.Repeat("ж€😀", 200),
		"bad \xff\xfe\xc3 bytes",
		strings.Repeat("a", rabbitmq.MaxNameLen-1) + "€",
		strings.Repeat("\xff", rabbitmq.MaxNameLen+3),
	} {
		l, err := rabbitmq.NewLocal(rabbitmq.LocalConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Observe(t.Context(), rabbitmq.Key{Queue: "q", Producer: name, JobType: name}, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		ks := l.Keys(0)
		want := text.Clean(name, rabbitmq.MaxNameLen)
		if len(ks) != 1 || ks[0].Key.Producer != want || ks[0].Key.JobType != want {
			t.Errorf("name %.20q...: keys %+v, want producer and job type %.20q...", name, ks, want)
		}
	}
}

// The rabbitmq package holds a long message for at most its FIFO wait
// times the broker's bound: keep the two equal.
func TestDefaultHoldIsTheBrokersBound(t *testing.T) {
	t.Parallel()
	if rabbitmq.DefaultHold != 1+sched.DefaultStretch {
		t.Errorf("rabbitmq.DefaultHold %v, the broker's bound %v: keep them equal", rabbitmq.DefaultHold, 1+sched.DefaultStretch)
	}
}
