// Package rawproto lets tests send gRPC requests as bytes made beforehand,
// as a client in a language whose protobuf does not check UTF-8 may. Go's
// protobuf refuses to encode a string that is not UTF-8, so a test encodes
// valid placeholders and swaps the bad bytes in (BadUTF8).
package rawproto

import (
	"bytes"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Request is a request encoded beforehand, sent as it is.
type Request []byte

// Codec sends a *Request as it is and any other message as protobuf, and
// decodes answers as protobuf.
type Codec struct{}

// CallOption makes a call use Codec.
func CallOption() grpc.CallOption { return grpc.ForceCodecV2(Codec{}) }

// Name is protobuf's, so that the broker decodes what Codec sends.
func (Codec) Name() string { return "proto" }

// Marshal implements encoding.CodecV2.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*Request); ok {
		return mem.BufferSlice{mem.SliceBuffer(*r)}, nil
	}
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

// Unmarshal implements encoding.CodecV2.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// BadUTF8 encodes m and replaces each placeholder in it (a key of swaps)
// with its value, bytes of the same length that are not UTF-8. It fails
// the test if a placeholder and its value differ in length or if m holds
// none of the placeholders.
func BadUTF8(t testing.TB, m proto.Message, swaps map[string]string) *Request {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	swapped := false
	for from, to := range swaps {
		if len(from) != len(to) {
			t.Fatalf("placeholder %q is not as long as %q", from, to)
		}
		swapped = swapped || bytes.Contains(b, []byte(from))
		b = bytes.ReplaceAll(b, []byte(from), []byte(to))
	}
	if !swapped {
		t.Fatalf("no placeholder in %v", m)
	}
	r := Request(b)
	return &r
}
