package server

import (
	"context"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/harbinger-mq/harbinger/api/harbinger/v1"
	"github.com/harbinger-mq/harbinger/internal/text"
)

// A string field of a request must be UTF-8 (protobuf says so, and the
// broker keeps producers, job types and headers as Go strings). gRPC
// answers a request that protobuf refuses to decode with Internal, as if
// the broker had failed, and names no field. So the broker decodes with
// requestCodec: a request whose only fault is a string that is not UTF-8
// decodes with the bad bytes replaced and a note, in an unknown field of
// the message that holds the string, of the fields at fault; the
// interceptors below refuse a request that carries one with
// InvalidArgument and the fields' names, and Publish refuses only the
// messages of a batch that carry one (fromMessage), storing the rest. A
// request that is not protobuf at all, which gRPC would answer with
// Internal too (it wraps any decoding error so, and offers no hook to
// change the code), decodes as an empty message with a note of the
// decoder's error, which the same interceptors refuse with
// InvalidArgument. A request that decodes is untouched: the codec does the
// extra work only after protobuf has refused one.

// UTF8Options are the server options that answer a request with a string
// that is not UTF-8 as above (ServerOptions includes them; the sidecar's
// server takes them too).
func UTF8Options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(newRequestCodec()),
		grpc.ChainUnaryInterceptor(checkUTF8Unary),
		grpc.ChainStreamInterceptor(checkUTF8Stream),
	}
}

// badUTF8Field is the unknown field that carries the note: the highest
// field number protobuf allows, which no message of the API uses.
const badUTF8Field protowire.Number = protowire.MaxValidNumber

// requestCodec is gRPC's protobuf codec, with the decoding above.
type requestCodec struct{ base encoding.CodecV2 }

func newRequestCodec() requestCodec {
	return requestCodec{base: encoding.GetCodecV2(protoenc.Name)}
}

func (c requestCodec) Name() string { return protoenc.Name }

func (c requestCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return err
	}
	if strings.Contains(err.Error(), "invalid UTF-8") {
		fixed, _, ferr := fixUTF8(data.Materialize(), m.ProtoReflect().Descriptor())
		if ferr == nil && proto.Unmarshal(fixed, m) == nil {
			return nil
		}
	}
	// Not protobuf, or not this message's: gRPC would answer Internal
	// whatever this returned. The request decodes as empty, with a note
	// the interceptors answer with InvalidArgument before any handler
	// sees it.
	proto.Reset(m)
	note := protowire.AppendTag(nil, malformedField, protowire.BytesType)
	note = protowire.AppendString(note, text.Clean(err.Error(), maxMalformedNote))
	m.ProtoReflect().SetUnknown(note)
	return nil
}

// malformedField is the unknown field that carries the note of a request
// that did not decode: the number below badUTF8Field.
const malformedField = badUTF8Field - 1

// maxMalformedNote bounds the decoder's error quoted back.
const maxMalformedNote = 512

// malformed returns the note requestCodec left in a request that did not
// decode, or "" when it did.
func malformed(m proto.Message) string { return unknownString(m, malformedField) }

// fixUTF8 returns b, the encoding of a message of type md, with every
// string field that is not valid UTF-8 made valid (each bad byte replaced
// by U+FFFD) and, in each message that holds such a field, a note of the
// fields' paths (see badUTF8). It returns the paths found, relative to md;
// a map's entries report their faults as the map field's own. A malformed
// encoding is an error.
func fixUTF8(b []byte, md protoreflect.MessageDescriptor) ([]byte, []string, error) {
	out := make([]byte, 0, len(b)+32)
	var bad []string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, nil, protowire.ParseError(n)
		}
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				return nil, nil, protowire.ParseError(m)
			}
			out = append(out, b[:n+m]...)
			b = b[n+m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return nil, nil, protowire.ParseError(m)
		}
		raw := b[:n+m]
		b = b[n+m:]
		switch fd.Kind() {
		default:
			// Bytes, packed scalars, or a field sent with the wrong wire
			// type (which the decoder keeps as an unknown field, byte for
			// byte): nothing to fix, so left exactly as it came.
			out = append(out, raw...)
			continue
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				v = []byte(strings.ToValidUTF8(string(v), "\uFFFD"))
				bad = append(bad, string(fd.Name()))
			}
		case protoreflect.MessageKind:
			sub, subBad, err := fixUTF8(v, fd.Message())
			if err != nil {
				return nil, nil, err
			}
			v = sub
			switch {
			case len(subBad) == 0:
			case fd.IsMap():
				bad = append(bad, string(fd.Name()))
			default:
				for _, p := range subBad {
					bad = append(bad, string(fd.Name())+"."+p)
				}
			}
		}
		out = protowire.AppendTag(out, num, protowire.BytesType)
		out = protowire.AppendBytes(out, v)
	}
	bad = dedupe(bad)
	if len(bad) > 0 && !md.IsMapEntry() {
		out = protowire.AppendTag(out, badUTF8Field, protowire.BytesType)
		out = protowire.AppendString(out, strings.Join(bad, ", "))
	}
	return out, bad, nil
}

// dedupe drops repeats from paths, keeping their order: a repeated field
// reports each path once.
func dedupe(paths []string) []string {
	seen := make(map[string]bool, len(paths))
	out := paths[:0]
	for _, p := range paths {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// badUTF8 returns the note requestCodec left in m: the paths of its
// string fields that were not UTF-8, or "" when there were none.
func badUTF8(m proto.Message) string { return unknownString(m, badUTF8Field) }

// unknownString returns the string in m's unknown field num, or "".
func unknownString(m proto.Message, num protowire.Number) string {
	if m == nil {
		return ""
	}
	u := m.ProtoReflect().GetUnknown()
	for len(u) > 0 {
		field, typ, n := protowire.ConsumeTag(u)
		if n < 0 {
			return ""
		}
		if field == num && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(u[n:])
			if m < 0 {
				return ""
			}
			return string(v)
		}
		m := protowire.ConsumeFieldValue(field, typ, u[n:])
		if m < 0 {
			return ""
		}
		u = u[n+m:]
	}
	return ""
}

// utf8Error is the status a request with a bad string gets.
func utf8Error(paths string) error {
	return invalidArg("%s: not valid UTF-8 (protobuf strings must be)", paths)
}

// checkUTF8Unary refuses a request requestCodec noted: one that did not
// decode at all, or one with a bad string. A publish with a bad string is
// left to Publish, which refuses only the messages at fault, and a
// ConsumeBatch to the Consume stream, which refuses only its items at
// fault.
func checkUTF8Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := checkUTF8(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// checkUTF8Stream refuses each streamed request requestCodec noted, as
// checkUTF8Unary does.
func checkUTF8Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, utf8Stream{ss})
}

type utf8Stream struct{ grpc.ServerStream }

func (s utf8Stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return checkUTF8(m)
}

func checkUTF8(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if note := malformed(m); note != "" {
		return invalidArg("the request is not a valid %s: %s", m.ProtoReflect().Descriptor().FullName(), note)
	}
	if _, ok := req.(*pb.PublishRequest); ok {
		return nil
	}
	if cr, ok := req.(*pb.ConsumeRequest); ok && cr.GetBatch() != nil {
		return nil // refused item by item (applyBatch)
	}
	if paths := badUTF8(m); paths != "" {
		return utf8Error(paths)
	}
	return nil
}
