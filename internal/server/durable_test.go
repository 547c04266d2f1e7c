package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/harbinger-mq/harbinger/internal/broker"
	"github.com/harbinger-mq/harbinger/internal/store"
)

// A disk that fails (full, or an fsync error) makes the broker refuse
// publishes with a status that says so; it never confirms what is not on
// disk, and what it confirmed before is there after a restart. /healthz
// says so too (503, with the disk's error), where it answered 200 "ok"
// while every publish was refused.
func TestDiskFailureRefusesPublishes(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"fsync", "full disk"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ffs := &store.FaultFS{}
			st, err := store.OpenFile(dir, store.FileOptions{FS: ffs, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			tb := setup(t, broker.Config{Store: st})
			hs := httptest.NewServer(HTTPHandler(tb.b))
			defer hs.Close()
			health := func() (int, string) {
				t.Helper()
				resp, err := hs.Client().Get(hs.URL + "/healthz")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body)
			}
			before := tb.publish(t, pmsg("q", "a"), pmsg("q", "b"))
			if code, body := health(); code != 200 || body != "ok\n" {
				t.Fatalf("healthz on a sound disk: %d %q", code, body)
			}
			want := "no space left on device"
			if fault == "fsync" {
				ffs.FailSync(true)
				want = "input/output error"
			} else {
				ffs.FailWrite(true)
			}
			for range 3 { // the first meets the failure, the rest the failed log
				wantCode(t, tb.refused(t, pmsg("q", "c")), codes.Unavailable, "not stored durably")
				if code, body := health(); code != http.StatusServiceUnavailable || !strings.Contains(body, "log failed") || !strings.Contains(body, want) {
					t.Fatalf("healthz while publishes are refused: %d %q, want 503 saying %q", code, body, want)
				}
			}
			tb.b.Shutdown(tb.ctx)
			st.Close()

			// A restart on a sound disk has what was confirmed.
			st2, err := store.OpenFile(dir, store.FileOptions{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer st2.Close()
			b2, err := broker.New(broker.Config{Store: st2, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer b2.Shutdown(tb.ctx)
			c, err := b2.Subscribe("q", "check", 10)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got := map[string]bool{}
			for range len(before) {
				d, err := c.Next(tb.ctx)
				if err != nil {
					t.Fatal(err)
				}
				got[d.ID] = true
			}
			for _, id := range before {
				if !got[id] {
					t.Fatalf("confirmed job %s lost; recovered %v", id, got)
				}
			}
			// The refused publishes were never confirmed; at most the first,
			// written before its fsync failed, can be there.
			if in, _ := b2.Queue("q"); in.Ready > 1 {
				t.Fatalf("recovered %d unconfirmed jobs, want at most 1", in.Ready)
			}
		})
	}
}
