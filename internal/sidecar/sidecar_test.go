package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/harbinger-mq/harbinger/rabbitmq"
)

func amqpURL() string {
	if u := os.Getenv("HARBINGER_AMQP_URL"); u != "" {
		return u
	}
	return DefaultAMQPURL
}

// requireRabbit skips the test when RabbitMQ is unreachable, unless
// HARBINGER_REQUIRE_SERVICES=1.
func requireRabbit(t *testing.T) {
	t.Helper()
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		if os.Getenv("HARBINGER_REQUIRE_SERVICES") == "1" {
			t.Fatalf("RabbitMQ unreachable and HARBINGER_REQUIRE_SERVICES=1: %v", err)
		}
		t.Skipf("RabbitMQ unreachable (set HARBINGER_AMQP_URL, or HARBINGER_REQUIRE_SERVICES=1 to fail): %v", err)
	}
	conn.Close()
}

// testExchange returns a unique exchange name, deleted (with its snapshot
// exchange) when the test ends.
func testExchange(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	ex := "harbinger-test.obs." + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		conn, err := amqp.Dial(amqpURL())
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_ = ch.ExchangeDelete(ex, false, false)
		_ = ch.ExchangeDelete(ex+snapshotSuffix, false, false)
		_ = ch.ExchangeDelete(ex+backlogSuffix, false, false)
	})
	return ex
}

// start runs a sidecar on ports of its own, with its own AMQP connection.
func start(t *testing.T, exchange string) *Sidecar {
	t.Helper()
	return startWith(t, Config{Share: ShareConfig{Exchange: exchange}})
}

// startWith is start with more of the config; cfg.Share.Exchange "" means
// no RabbitMQ.
func startWith(t *testing.T, cfg Config) *Sidecar {
	t.Helper()
	exchange := cfg.Share.Exchange
	cfg.Listen, cfg.HTTP, cfg.AMQPURL = "127.0.0.1:0", "127.0.0.1:0", amqpURL()
	cfg.Predict.RecomputeEvery = 1
	if exchange == "" {
		cfg.AMQPURL = "-"
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if exchange != "" {
		select {
		case <-s.Connected():
		case <-time.After(5 * time.Second):
			t.Fatal("sidecar did not connect to RabbitMQ")
		}
	}
	return s
}

func dialRemote(t *testing.T, s *Sidecar) *rabbitmq.Remote {
	t.Helper()
	r, err := rabbitmq.DialSidecarOptions(context.Background(), s.Addr(), rabbitmq.RemoteOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-tick.C:
		}
	}
}

var (
	shortKey = rabbitmq.Key{Queue: "jobs", Producer: "web", JobType: "thumbnail"}
	longKey  = rabbitmq.Key{Queue: "jobs", Producer: "web", JobType: "report"}
)

func count(s *Sidecar, k rabbitmq.Key) uint64 {
	st, _ := s.Local().Lookup(k)
	return st.Count
}

// Two sidecars, each fed half the observations by its own publishers, end
// up knowing all of them, and tier each kind of job by the whole fleet's
// mix even when each one's publishers send only one kind.
func TestTwoSidecarsConverge(t *testing.T) {
	t.Parallel()
	requireRabbit(t)
	ctx := context.Background()
	ex := testExchange(t)
	a, b := start(t, ex), start(t, ex)
	ra, rb := dialRemote(t, a), dialRemote(t, b)
	// Let the two introduce themselves first (b's snapshot, a's answer,
	// b's answer to that), so that what follows is learned through the
	// shared batches, not replayed from a snapshot.
	eventually(t, 5*time.Second, "the sidecars to exchange snapshots", func() bool {
		return a.Stats().Share.SnapshotsRead >= 2
	})
	for range 10 {
		if err := ra.Observe(ctx, shortKey, 5*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := rb.Observe(ctx, longKey, 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "both sidecars to learn every observation", func() bool {
		return count(a, shortKey) == 10 && count(a, longKey) == 10 && count(b, shortKey) == 10 && count(b, longKey) == 10
	})
	for _, k := range []rabbitmq.Key{shortKey, longKey} {
		sa, _ := a.Local().Lookup(k)
		sb, _ := b.Local().Lookup(k)
		if sa.EWMA != sb.EWMA {
			t.Errorf("%s: EWMA %v on one sidecar, %v on the other", k.JobType, sa.EWMA, sb.EWMA)
		}
	}
	// Each sidecar's publishers send one kind of job: a's the short one,
	// b's the long one. Tier boundaries are drawn from the fleet's
	// predictions, each sidecar's own and those its peers share, so each
	// sees both kinds and tiers the long job below the short one; drawn
	// from its own predictions alone, b would see only long jobs and give
	// them its shortest tier.
	for range 40 {
		_, _ = ra.Predict(ctx, shortKey)
		_, _ = rb.Predict(ctx, longKey)
	}
	eventually(t, 5*time.Second, "each sidecar to record the other's predictions", func() bool {
		return a.Stats().Share.PredictionsRead == 40 && b.Stats().Share.PredictionsRead == 40
	})
	ps, _ := ra.Predict(ctx, shortKey)
	pl, _ := rb.Predict(ctx, longKey)
	if ps.Tier != 0 || pl.Tier == 0 || ps.Cold || pl.Cold {
		t.Errorf("short on a %+v, long on b %+v: want short in tier 0, long below it", ps, pl)
	}
	if a.Stats().Share.Sent != 10 || a.Stats().Share.Received != 10 {
		t.Errorf("sidecar a shared %+v, want 10 sent and 10 received", a.Stats().Share)
	}
}

// A sidecar that starts after the learning catches up from snapshots, at
// once: the newcomer's first snapshot makes the others answer.
func TestLateSidecarCatchesUp(t *testing.T) {
	t.Parallel()
	requireRabbit(t)
	ctx := context.Background()
	ex := testExchange(t)
	a := start(t, ex)
	ra := dialRemote(t, a)
	for range 50 {
		_ = ra.Observe(ctx, longKey, 300*time.Millisecond)
	}
	// Shared before the late one is listening: it learns only from snapshots.
	eventually(t, 5*time.Second, "the observations to be shared", func() bool {
		return a.Stats().Share.Sent == 50
	})
	late := start(t, ex)
	eventually(t, 5*time.Second, "the late sidecar to catch up", func() bool {
		return count(late, longKey) >= 3
	})
	st, _ := late.Local().Lookup(longKey)
	if st.Count != DefaultCatchUpObservations || st.EWMA != 300*time.Millisecond {
		t.Errorf("caught up to %+v, want %d replays of 300ms", st, DefaultCatchUpObservations)
	}
	if pr, _ := dialRemote(t, late).Predict(ctx, longKey); pr.Cold {
		t.Errorf("late sidecar still cold on a learned key: %+v", pr)
	}
}

// Without RabbitMQ the sidecar serves predictions and metrics from its own
// learning.
func TestMetricsWithoutRabbitMQ(t *testing.T) {
	t.Parallel()
	s := start(t, "")
	r := dialRemote(t, s)
	ctx := context.Background()
	for range 3 {
		if err := r.Observe(ctx, shortKey, 5*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if pr, _ := r.Predict(ctx, shortKey); pr.Cold {
		t.Errorf("prediction after 3 observations is cold: %+v", pr)
	}
	body := scrape(t, s)
	for _, want := range []string{
		"harbinger_predictor_keys 1",
		"harbinger_predictor_observations_total 3",
		`harbinger_predictor_predictions_total{tier="0"} 1`,
		"harbinger_sidecar_amqp_connected 0",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

// A sidecar given several nodes shares through the first that takes it,
// and says which in its stats and metrics; a dead node ahead of a live one
// costs one refused dial, not a retry period.
func TestSidecarSkipsDeadNode(t *testing.T) {
	requireRabbit(t)
	t.Parallel()
	dead := "amqp://guest:guest@127.0.0.1:1/" // nothing listens on port 1
	s, err := Start(Config{Listen: "127.0.0.1:0", HTTP: "127.0.0.1:0", AMQPURL: dead + " , " + amqpURL(),
		Share: ShareConfig{Exchange: testExchange(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	select {
	case <-s.Connected():
	case <-time.After(5 * time.Second):
		t.Fatal("sidecar did not connect through the second URL")
	}
	st := s.Stats()
	want := nodeOf(amqpURL())
	if !st.Connected || st.Node != want || st.Connects != 1 {
		t.Errorf("stats: connected %v, node %q, connects %d; want true, %q, 1", st.Connected, st.Node, st.Connects, want)
	}
	body := scrape(t, s)
	for _, m := range []string{"harbinger_sidecar_amqp_connected 1", `harbinger_sidecar_amqp_node{node="` + want + `"} 1`, "harbinger_sidecar_amqp_connections_total 1"} {
		if !strings.Contains(body, m) {
			t.Errorf("metrics lack %q", m)
		}
	}
}

// A URL list that cannot work fails at start, naming the bad entry and
// never its password.
func TestSidecarRefusesBadURLs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ urls, want string }{
		{"amqp://guest:secret@a:5672/,,amqp://b/", "URL 2 of 3 is empty"},
		{"amqp://guest:secret@a:5672/,", "URL 2 of 2 is empty"},
		{"http://guest:secret@a/", "URL 1 of 1"},
		{"amqp://guest:secret@a/,amqp://guest:secret@b:notaport/", "URL 2 of 2"},
		{"amqp://guest:secret@\xff/", "URL 1 of 1"},
	} {
		_, err := Start(Config{Listen: "127.0.0.1:0", HTTP: "-", AMQPURL: tc.urls})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start with %q: %v, want an error with %q", tc.urls, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("the error for %q shows the password: %v", tc.urls, err)
		}
	}
	urls, err := ParseAMQPURLs(" amqp://a/ ,amqps://b:5671/vhost")
	if err != nil || len(urls) != 2 || urls[0] != "amqp://a/" || urls[1] != "amqps://b:5671/vhost" {
		t.Errorf("ParseAMQPURLs: %q, %v", urls, err)
	}
}

// FuzzParseAMQPURLs: any text gives URLs or an error, never a panic, and
// an error never shows a password that any entry of the list holds.
func FuzzParseAMQPURLs(f *testing.F) {
	for _, s := range []string{"amqp://guest:guest@127.0.0.1:5672/", "amqp://u:p4ss@a/,amqps://u:s3cret@b:99999/",
		"amqp://u:p%2Cw@a/,", ",,", "amqp://u:hunter22@[::1/", "amqp://u:pa\xffss@h/", "http://u:topsecret@h/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		urls, err := ParseAMQPURLs(list)
		if err == nil {
			if len(urls) == 0 {
				t.Fatalf("%q: no URLs and no error", list)
			}
			for _, u := range urls {
				if _, err := amqp.ParseURI(u); err != nil {
					t.Fatalf("%q: returned %q, which does not parse: %v", list, u, err)
				}
			}
			return
		}
		for _, part := range strings.Split(list, ",") {
			_, rest, ok := strings.Cut(part, "://")
			if !ok {
				continue
			}
			userinfo, _, ok := strings.Cut(rest, "@")
			if !ok {
				continue
			}
			if _, pw, ok := strings.Cut(userinfo, ":"); ok && len(pw) >= 6 && strings.Contains(err.Error(), pw) {
				t.Fatalf("the error for %q shows the password %q: %v", list, pw, err)
			}
		}
	})
}
