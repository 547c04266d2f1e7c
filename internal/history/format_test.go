package history

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"
)

func sampleEntries(n, nkeys int) []Entry {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := []string{"send-email", "report.export", "résumé.pdf", "発送", "emoji-🚀", "a\xffb\xc0", ""}
	for len(keys) < nkeys {
		keys = append(keys, fmt.Sprintf("type-%d", len(keys)))
	}
	var es []Entry
	now := t0
	for range n {
		now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		es = append(es, randomEntry(rng, now, keys))
	}
	return es
}

func encode(t testing.TB, h Header, es []Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, h, es); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	es := sampleEntries(20_000, 2000)
	h := Header{Queue: "jobs-é", Policy: "fifo", WorkersSeen: WorkersSeen(es), Since: t0, Until: t0.Add(time.Hour), Dropped: 12}
	data := encode(t, h, es)
	gh, got, err := Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if gh.Version != Version || gh.Queue != h.Queue || gh.Jobs != len(es) || gh.WorkersSeen != h.WorkersSeen || gh.Dropped != 12 || !gh.Since.Equal(t0) {
		t.Fatalf("header %+v", gh)
	}
	if len(got) != len(es) {
		t.Fatalf("%d entries back, want %d", len(got), len(es))
	}
	for i := range es {
		want := es[i]
		want.Key = strings.ToValidUTF8(want.Key, "\uFFFD")
		if !sameEntry(got[i], want) {
			t.Fatalf("entry %d: %+v, want %+v", i, got[i], want)
		}
	}
	// Encoding what was decoded gives the same bytes.
	if again := encode(t, gh, got); !bytes.Equal(again, data) {
		t.Fatal("re-encoding the decoded file changed it")
	}
}

func TestWorkersSeen(t *testing.T) {
	t.Parallel()
	var es []Entry
	// Three workers, each running back-to-back one-second jobs for a minute.
	for w := range 3 {
		for i := range 60 {
			done := t0.Add(time.Duration(i+1)*time.Second + time.Duration(w)*time.Millisecond)
			es = append(es, Entry{Arrived: t0, Started: done.Add(-time.Second), Done: done, Duration: time.Second, Attempt: 1, Outcome: Ack})
		}
	}
	if got := WorkersSeen(es); got != 3 {
		t.Fatalf("WorkersSeen = %d, want 3", got)
	}
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	es := sampleEntries(3, 3)
	for i := range es {
		es[i].Key = "k"
	}
	good := string(encode(t, Header{Queue: "q", Policy: "fifo", Since: t0, Until: t0}, es))
	lines := strings.SplitAfter(good, "\n")
	hdr, l1 := lines[0], lines[1]
	swap := func(s, old, new string) string {
		if !strings.Contains(s, old) {
			t.Fatalf("%q not in %s", old, s)
		}
		return strings.Replace(s, old, new, 1)
	}
	body := strings.Join(lines[1:], "")
	tests := []struct {
		name, file string
		line       int
		field      string
		msg        string
	}{
		{"empty line", hdr + "\n" + strings.Join(lines[2:], ""), 2, "", "empty line"},
		{"not JSON", hdr + "{\"arrived\": nope}\n" + body, 2, "", "not JSON"},
		{"unknown field", hdr + swap(l1, `"size"`, `"payload":"x","size"`) + strings.Join(lines[2:], ""), 2, "payload", "unknown field"},
		{"missing field", hdr + swap(l1, `"outcome":"`, `"outcomX":"`) + strings.Join(lines[2:], ""), 2, "outcomX", "unknown"},
		{"wrong type", hdr + swap(l1, `"attempt":`, `"attempt":"1",`+`"x":`) + strings.Join(lines[2:], ""), 2, "attempt", "want int"},
		{"bad outcome", hdr + swap(l1, `"outcome":"`, `"outcome":"x`) + strings.Join(lines[2:], ""), 2, "outcome", "want ack"},
		{"bad attempt", hdr + attemptRe.ReplaceAllString(l1, `"attempt":0`) + strings.Join(lines[2:], ""), 2, "attempt", "want 1 to"},
		{"invalid utf8", hdr + swap(l1, `"key":"k"`, "\"key\":\"k\xff\"") + strings.Join(lines[2:], ""), 2, "", "invalid UTF-8"},
		{"newer version", swap(hdr, `"version":1`, `"version":2`) + body, 1, "version", "reads version 1"},
		{"other format", swap(hdr, `"format":"harbinger-history"`, `"format":"csv"`) + body, 1, "format", "not a"},
		{"header field missing", swap(hdr, `"queue":"q",`, ``) + body, 1, "queue", "missing"},
		{"truncated lines", hdr + strings.Join(lines[1:3], ""), 4, "", "ends after 2 of the 3"},
		{"truncated mid-line", hdr + l1 + lines[2][:len(lines[2])/2], 3, "", "truncated"},
		{"extra line", good + l1, 5, "", "more lines"},
		{"two objects", hdr + strings.TrimSuffix(l1, "\n") + "{}\n" + strings.Join(lines[2:], ""), 2, "", "more than one"},
		{"huge line", hdr + strings.Repeat(" ", MaxLine+10) + "\n", 2, "", "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := Decode(strings.NewReader(tc.file))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *ParseError", err)
			}
			if pe.Line != tc.line || pe.Field != tc.field || !strings.Contains(pe.Msg, tc.msg) {
				t.Fatalf("got line %d field %q: %v; want line %d field %q with %q", pe.Line, pe.Field, pe.Msg, tc.line, tc.field, tc.msg)
			}
		})
	}
	if _, _, err := Decode(strings.NewReader("")); !errors.Is(err, ErrEmpty) {
		t.Fatalf("empty file: %v", err)
	}
}

// TestDecodeTruncatedBig cuts a big file at many places: every cut is
// refused, none panics, and each names a line at or after the cut's.
func TestDecodeTruncatedBig(t *testing.T) {
	t.Parallel()
	data := encode(t, Header{Queue: "q", Policy: "bounded"}, sampleEntries(3000, 500))
	rng := rand.New(rand.NewPCG(9, 9))
	for range 60 {
		cut := 1 + rng.IntN(len(data)-2)
		_, _, err := Decode(bytes.NewReader(data[:cut]))
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Fatalf("cut at %d of %d: err = %v", cut, len(data), err)
		}
		if want := bytes.Count(data[:cut], []byte("\n")); pe.Line < want {
			t.Fatalf("cut at %d: line %d, but %d whole lines came before", cut, pe.Line, want)
		}
	}
}

var attemptRe = regexp.MustCompile(`"attempt":\d+`)

func FuzzDecode(f *testing.F) {
	es := sampleEntries(4, 4)
	f.Add(encode(f, Header{Queue: "q", Policy: "fifo", Since: t0, Until: t0}, es))
	f.Add([]byte(`{"format":"harbinger-history","version":1,"queue":"q","policy":"","workers_seen":0,"since":"2026-01-01T00:00:00Z","until":"2026-01-01T00:00:00Z","jobs":0,"dropped":0}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, es, err := Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		again := encode(t, h, es)
		h2, es2, err := Decode(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("re-encoded file refused: %v", err)
		}
		if h2.Queue != h.Queue || h2.Jobs != h.Jobs || len(es2) != len(es) {
			t.Fatalf("header %+v then %+v", h, h2)
		}
		for i := range es {
			if !sameEntry(es[i], es2[i]) {
				t.Fatalf("entry %d: %+v then %+v", i, es[i], es2[i])
			}
		}
		if third := encode(t, h2, es2); !bytes.Equal(third, again) {
			t.Fatal("encoding is not stable")
		}
	})
}

// BenchmarkDecode reads a file of 10,000 entries.
func BenchmarkDecode(b *testing.B) {
	data := encode(b, Header{Queue: "q", Policy: "fifo"}, sampleEntries(10_000, 500))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
