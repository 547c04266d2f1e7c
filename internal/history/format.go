package history

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The file format: JSON Lines, a header object on the first line and then
// one object per settled delivery, oldest first. See docs/history.md.
const (
	// FormatName is the header's "format".
	FormatName = "harbinger-history"
	// Version is the format version this code writes and reads. A reader
	// refuses a newer version rather than guess.
	Version = 1
	// MaxLine bounds a line of a history file, in bytes.
	MaxLine = 64 << 10
)

// Header is a history file's first line.
type Header struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Queue   string `json:"queue"`
	// Policy is the queue's scheduling policy when the history was taken.
	Policy string `json:"policy"`
	// WorkersSeen is the most handlers the record saw running at once
	// (WorkersSeen): the replay's worker count unless one is given.
	WorkersSeen int `json:"workers_seen"`
	// Since and Until bound the window asked for; Jobs is the number of
	// lines that follow, so a truncated file is caught.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	Jobs  int       `json:"jobs"`
	// Dropped counts the entries the record had dropped for its caps by
	// then (over its whole life, not only this window).
	Dropped int64 `json:"dropped"`
}

// line is an entry as a file line; pointers find missing fields.
type line struct {
	Arrived    *time.Time `json:"arrived"`
	Producer   *string    `json:"producer"`
	Key        *string    `json:"key"`
	Size       *uint64    `json:"size"`
	Attempt    *int       `json:"attempt"`
	Started    *time.Time `json:"started"`
	Done       *time.Time `json:"done"`
	DurationNS *int64     `json:"duration_ns"`
	Outcome    *string    `json:"outcome"`
}

type headerLine struct {
	Format      *string    `json:"format"`
	Version     *int       `json:"version"`
	Queue       *string    `json:"queue"`
	Policy      *string    `json:"policy"`
	WorkersSeen *int       `json:"workers_seen"`
	Since       *time.Time `json:"since"`
	Until       *time.Time `json:"until"`
	Jobs        *int       `json:"jobs"`
	Dropped     *int64     `json:"dropped"`
}

// ParseError is a history file refused: the line (1-based) and the field
// at fault ("" for the line as a whole).
type ParseError struct {
	Line  int
	Field string
	Msg   string
}

func (e *ParseError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("history: line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("history: line %d: field %q: %s", e.Line, e.Field, e.Msg)
}

// ErrEmpty is returned by Decode for a file with no header line.
var ErrEmpty = errors.New("history: the file is empty; want a header line first")

// The times a file may hold: those a Unix nanosecond count can.
var (
	minTime = time.Unix(0, 1).UTC()
	maxTime = time.Unix(0, 1<<63-1).UTC()
)

// Encode writes h and es as a history file. h's Format, Version and Jobs
// are set from the constants and es. Key text that is not valid UTF-8
// (the broker refuses such names, so only a hand-made entry has it) is
// written with U+FFFD in place of each bad byte.
func Encode(w io.Writer, h Header, es []Entry) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	h.Format, h.Version, h.Jobs = FormatName, Version, len(es)
	h.Since, h.Until = h.Since.UTC(), h.Until.UTC()
	h.Queue, h.Policy = strings.ToValidUTF8(h.Queue, "\uFFFD"), strings.ToValidUTF8(h.Policy, "\uFFFD")
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		return fmt.Errorf("history: header: %w", err)
	}
	for i := range es {
		e := &es[i]
		p, k := strings.ToValidUTF8(e.Producer, "\uFFFD"), strings.ToValidUTF8(e.Key, "\uFFFD")
		size, attempt, dur, out := e.Size, e.Attempt, int64(e.Duration), e.Outcome.String()
		a, s, d := e.Arrived.UTC(), e.Started.UTC(), e.Done.UTC()
		l := line{Arrived: &a, Producer: &p, Key: &k, Size: &size, Attempt: &attempt, Started: &s, Done: &d, DurationNS: &dur, Outcome: &out}
		if err := enc.Encode(l); err != nil {
			return fmt.Errorf("history: entry %d: %w", i, err)
		}
	}
	return bw.Flush()
}

// Decode reads a history file and checks every line strictly: unknown,
// missing or ill-typed fields, impossible times, an unknown outcome, a
// newer version and a file holding fewer or more lines than its header
// says are each refused with a *ParseError naming the line and field.
func Decode(r io.Reader) (Header, []Entry, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var h Header
	var es []Entry
	n := 0
	for {
		raw, err := readLine(br)
		if err == io.EOF {
			break
		}
		n++
		if err != nil {
			return h, nil, &ParseError{Line: n, Msg: err.Error()}
		}
		if n == 1 {
			if h, err = decodeHeader(raw); err != nil {
				return h, nil, withLine(err, n)
			}
			es = make([]Entry, 0, min(h.Jobs, 1<<20))
			continue
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			return h, nil, &ParseError{Line: n, Msg: "empty line"}
		}
		if len(es) == h.Jobs {
			return h, nil, &ParseError{Line: n, Msg: fmt.Sprintf("more lines than the %d jobs the header says", h.Jobs)}
		}
		e, err := decodeEntry(raw)
		if err != nil {
			return h, nil, withLine(err, n)
		}
		es = append(es, e)
	}
	if n == 0 {
		return h, nil, ErrEmpty
	}
	if len(es) < h.Jobs {
		return h, nil, &ParseError{Line: n + 1, Msg: fmt.Sprintf("the file ends after %d of the %d jobs the header says: truncated", len(es), h.Jobs)}
	}
	return h, es, nil
}

// readLine reads one line without its newline, refusing one over MaxLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > MaxLine+1 {
			return nil, fmt.Errorf("line longer than %d bytes", MaxLine)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(buf) == 0:
			return nil, io.EOF
		case err != nil && err != io.EOF:
			return nil, err
		}
		return bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte("\n")), []byte("\r")), nil
	}
}

func withLine(err error, n int) error {
	var pe *ParseError
	if errors.As(err, &pe) {
		pe.Line = n
		return pe
	}
	return &ParseError{Line: n, Msg: err.Error()}
}

// strict decodes one JSON object from raw into v: no unknown field, no
// trailing data, valid UTF-8.
func strict(raw []byte, v any) error {
	if i := invalidUTF8(raw); i >= 0 {
		return &ParseError{Msg: fmt.Sprintf("invalid UTF-8 at byte %d", i+1)}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return &ParseError{Field: te.Field, Msg: fmt.Sprintf("want %v, got JSON %s", te.Type, te.Value)}
		case errors.As(err, &se):
			return &ParseError{Msg: fmt.Sprintf("not JSON at byte %d: %v", se.Offset, se)}
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			return &ParseError{Msg: "the object is cut short: truncated"}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return &ParseError{Field: f, Msg: "unknown field"}
		}
		// A time that does not parse reports the value, not the field.
		return &ParseError{Msg: err.Error()}
	}
	if dec.More() {
		return &ParseError{Msg: "more than one JSON object on the line"}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &ParseError{Msg: "trailing data after the object"}
	}
	return nil
}

func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

func missing(field string) error { return &ParseError{Field: field, Msg: "missing"} }

func decodeHeader(raw []byte) (Header, error) {
	var hl headerLine
	if err := strict(raw, &hl); err != nil {
		return Header{}, err
	}
	if hl.Format == nil {
		return Header{}, missing("format")
	}
	if *hl.Format != FormatName {
		return Header{}, &ParseError{Field: "format", Msg: fmt.Sprintf("%q is not a %s file", *hl.Format, FormatName)}
	}
	if hl.Version == nil {
		return Header{}, missing("version")
	}
	if *hl.Version < 1 || *hl.Version > Version {
		return Header{}, &ParseError{Field: "version", Msg: fmt.Sprintf("version %d; this harbinger reads version %d", *hl.Version, Version)}
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{{"queue", hl.Queue != nil}, {"policy", hl.Policy != nil}, {"workers_seen", hl.WorkersSeen != nil},
		{"since", hl.Since != nil}, {"until", hl.Until != nil}, {"jobs", hl.Jobs != nil}, {"dropped", hl.Dropped != nil}} {
		if !f.ok {
			return Header{}, missing(f.name)
		}
	}
	h := Header{Format: *hl.Format, Version: *hl.Version, Queue: *hl.Queue, Policy: *hl.Policy, WorkersSeen: *hl.WorkersSeen,
		Since: hl.Since.UTC(), Until: hl.Until.UTC(), Jobs: *hl.Jobs, Dropped: *hl.Dropped}
	switch {
	case h.Queue == "":
		return h, &ParseError{Field: "queue", Msg: "empty"}
	case h.WorkersSeen < 0:
		return h, &ParseError{Field: "workers_seen", Msg: fmt.Sprintf("negative: %d", h.WorkersSeen)}
	case h.Jobs < 0:
		return h, &ParseError{Field: "jobs", Msg: fmt.Sprintf("negative: %d", h.Jobs)}
	case h.Dropped < 0:
		return h, &ParseError{Field: "dropped", Msg: fmt.Sprintf("negative: %d", h.Dropped)}
	case h.Until.Before(h.Since):
		return h, &ParseError{Field: "until", Msg: "before since"}
	}
	return h, nil
}

func decodeEntry(raw []byte) (Entry, error) {
	var l line
	if err := strict(raw, &l); err != nil {
		return Entry{}, err
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{{"arrived", l.Arrived != nil}, {"producer", l.Producer != nil}, {"key", l.Key != nil}, {"size", l.Size != nil},
		{"attempt", l.Attempt != nil}, {"started", l.Started != nil}, {"done", l.Done != nil},
		{"duration_ns", l.DurationNS != nil}, {"outcome", l.Outcome != nil}} {
		if !f.ok {
			return Entry{}, missing(f.name)
		}
	}
	e := Entry{Arrived: l.Arrived.UTC(), Producer: *l.Producer, Key: *l.Key, Size: *l.Size, Attempt: *l.Attempt,
		Started: l.Started.UTC(), Done: l.Done.UTC(), Duration: time.Duration(*l.DurationNS)}
	for _, t := range []struct {
		name string
		v    time.Time
	}{{"arrived", e.Arrived}, {"started", e.Started}, {"done", e.Done}} {
		if t.v.Before(minTime) || t.v.After(maxTime) {
			return e, &ParseError{Field: t.name, Msg: fmt.Sprintf("%s is outside 1970 to 2262", t.v.Format(time.RFC3339Nano))}
		}
	}
	switch o := *l.Outcome; o {
	case "ack":
		e.Outcome = Ack
	case "nack":
		e.Outcome = Nack
	case "dead":
		e.Outcome = Dead
	default:
		return e, &ParseError{Field: "outcome", Msg: fmt.Sprintf("%q; want ack, nack or dead", o)}
	}
	switch {
	case e.Attempt < 1 || e.Attempt > 65535:
		return e, &ParseError{Field: "attempt", Msg: fmt.Sprintf("%d; want 1 to 65535", e.Attempt)}
	case e.Started.Before(e.Arrived):
		return e, &ParseError{Field: "started", Msg: "before arrived"}
	case e.Done.Before(e.Started):
		return e, &ParseError{Field: "done", Msg: "before started"}
	case e.Duration < 0:
		return e, &ParseError{Field: "duration_ns", Msg: fmt.Sprintf("negative: %d", e.Duration)}
	case e.Outcome == Ack && e.Duration == 0:
		return e, &ParseError{Field: "duration_ns", Msg: "an ack needs the handler's duration"}
	}
	return e, nil
}

// WorkersSeen is the most handlers es shows running at once: each acked
// entry's handler ran for its Duration up to its Done.
func WorkersSeen(es []Entry) int {
	type edge struct {
		at    int64
		delta int
	}
	edges := make([]edge, 0, 2*len(es))
	for i := range es {
		e := &es[i]
		if e.Outcome != Ack || e.Duration <= 0 {
			continue
		}
		end := e.Done.UnixNano()
		edges = append(edges, edge{end - int64(e.Duration), 1}, edge{end, -1})
	}
	// Ends before starts at the same instant: back-to-back runs on one
	// worker are one worker.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta)
	})
	cur, best := 0, 0
	for _, e := range edges {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}
