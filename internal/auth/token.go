// Package auth owns who may do what on a broker: bearer tokens, each with
// permissions scoped to queue-name prefixes, kept hashed in a file the
// broker reloads on SIGHUP, and the TLS settings that carry them. The gRPC
// interceptors (internal/server) and the dashboard (internal/web) ask the
// same Grant, so a token means the same on both ports.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Permission is one kind of access to a queue.
type Permission string

// The permissions. Admin includes the other three; the others include
// nothing but themselves.
const (
	// Read sees a queue: the dashboard's pages, the JSON read API, the
	// Admin list calls and /metrics.
	Read Permission = "read"
	// Publish puts jobs in a queue.
	Publish Permission = "publish"
	// Consume takes jobs from a queue and settles them.
	Consume Permission = "consume"
	// Admin declares, pauses, purges and handles dead letters, and may do
	// everything the others may.
	Admin Permission = "admin"
)

// Errors.
var (
	// ErrNoToken: the request carried no token.
	ErrNoToken = errors.New("auth: no token given")
	// ErrBadToken: the token is not in the token file.
	ErrBadToken = errors.New("auth: token not recognised")
)

// DeniedError says which permission a known token lacks.
type DeniedError struct {
	Token string // the token's name in the file, never the token
	Perm  Permission
	Queue string // empty for a broker-wide action
}

func (e *DeniedError) Error() string {
	if e.Queue == "" {
		return fmt.Sprintf("auth: token %q may not %s on every queue", e.Token, e.Perm)
	}
	return fmt.Sprintf("auth: token %q may not %s on queue %q", e.Token, e.Perm, e.Queue)
}

// Scope grants one permission on the queues whose names start with Prefix
// (every queue when Prefix is empty).
type Scope struct {
	Perm   Permission
	Prefix string
}

// ParseScope reads "perm" (every queue) or "perm:prefix", e.g.
// "publish:orders." for the queues whose names start with "orders.". A
// trailing "*" on the prefix is allowed and means the same.
func ParseScope(s string) (Scope, error) {
	perm, prefix, colon := strings.Cut(strings.TrimSpace(s), ":")
	switch Permission(perm) {
	case Read, Publish, Consume, Admin:
	default:
		return Scope{}, fmt.Errorf("scope %q: permission %q is not read, publish, consume or admin", s, perm)
	}
	if colon && prefix == "" {
		// Most likely a prefix left out, which would grant every queue.
		return Scope{}, fmt.Errorf("scope %q: nothing after the colon; write %q or %q for every queue, or a prefix", s, perm, perm+":*")
	}
	prefix = strings.TrimSuffix(prefix, "*")
	// A prefix no queue name can start with would grant nothing, and one
	// of invalid UTF-8 would not survive the token file (YAML reads it
	// back as other characters).
	for _, r := range prefix {
		if r < 0x21 || r == 0x7f || r == utf8.RuneError {
			return Scope{}, fmt.Errorf("scope %q: the prefix has a space, control character or invalid UTF-8, which no queue name has", s)
		}
	}
	return Scope{Perm: Permission(perm), Prefix: prefix}, nil
}

// CheckName checks a token's name: it is shown in the broker's log and on
// the dashboard, so it must be text: not empty, valid UTF-8 and without
// control characters.
func CheckName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errors.New("a token's name must not be empty")
	case !utf8.ValidString(name):
		return fmt.Errorf("token name %q is not valid UTF-8", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("token name %q has a control character", name)
	}
	return nil
}

// String is the scope as ParseScope reads it back: a prefix that ends in
// "*" gets one more, since ParseScope drops one.
func (s Scope) String() string {
	switch {
	case s.Prefix == "":
		return string(s.Perm)
	case strings.HasSuffix(s.Prefix, "*"):
		return string(s.Perm) + ":" + s.Prefix + "*"
	}
	return string(s.Perm) + ":" + s.Prefix
}

func (s Scope) grants(p Permission) bool { return s.Perm == p || s.Perm == Admin }

// Grant is what one token may do.
type Grant struct {
	Name   string
	Scopes []Scope
}

// Allows reports whether the grant has p on queue.
func (g *Grant) Allows(p Permission, queue string) bool {
	for _, s := range g.Scopes {
		if s.grants(p) && strings.HasPrefix(queue, s.Prefix) {
			return true
		}
	}
	return false
}

// AllowsAll reports whether the grant has p on every queue, as a
// broker-wide view such as /metrics needs.
func (g *Grant) AllowsAll(p Permission) bool { return g.Allows(p, "") }

// Check returns nil when the grant has p on queue, else a *DeniedError.
func (g *Grant) Check(p Permission, queue string) error {
	if g.Allows(p, queue) {
		return nil
	}
	return &DeniedError{Token: g.Name, Perm: p, Queue: queue}
}

// CheckAll returns nil when the grant has p on every queue.
func (g *Grant) CheckAll(p Permission) error {
	if g.AllowsAll(p) {
		return nil
	}
	return &DeniedError{Token: g.Name, Perm: p}
}

// Tokens is the set of tokens a broker accepts, read from a file of their
// hashes. It is safe for concurrent use; Reload swaps the whole set at once.
//
// What was checked once, when a call began, must be checked again after a
// reload for as long as the call lasts (a stream): Generation tells a
// stale check from a current one, and OnReload wakes whoever holds one.
type Tokens struct {
	path string

	mu       sync.RWMutex
	byHash   map[[sha256.Size]byte]*Grant
	reloaded context.Context // done at the next Reload that takes
	next     context.CancelFunc
	gen      atomic.Uint64 // Reloads that took; raised after byHash is swapped
}

// tokenFile is the YAML layout of the token file:
//
//	tokens:
//	  - name: orders-service
//	    sha256: 5e88...  # harbinger token prints it
//	    scopes: [publish:orders., consume:orders.]
//	  - name: ops
//	    sha256: 9f86...
//	    scopes: [admin]
type tokenFile struct {
	Tokens []struct {
		Name   string   `yaml:"name"`
		SHA256 string   `yaml:"sha256"`
		Scopes []string `yaml:"scopes"`
	} `yaml:"tokens"`
}

// LoadTokens reads the token file at path.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Path is the file the tokens are read from.
func (t *Tokens) Path() string { return t.path }

// Len is the number of tokens.
func (t *Tokens) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byHash)
}

// Reload reads the file again. On an error the tokens in force stay as
// they were, so a typo in the file locks nobody out.
func (t *Tokens) Reload() error {
	data, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("auth: token file: %w", err)
	}
	m, err := parseTokens(data)
	if err != nil {
		return fmt.Errorf("auth: token file %s: %w", t.path, err)
	}
	t.mu.Lock()
	t.byHash = m
	t.gen.Add(1)
	wake := t.next
	t.reloaded, t.next = context.WithCancel(context.Background())
	t.mu.Unlock()
	if wake != nil {
		wake()
	}
	return nil
}

// Generation counts the reloads that took effect. A check made with the
// grant Lookup returned after reading Generation holds for as long as
// Generation still returns the same number.
func (t *Tokens) Generation() uint64 { return t.gen.Load() }

// OnReload arranges for f to run, in a goroutine of its own, after the
// next Reload that takes effect (a failed one changes nothing). It covers
// one reload: to hear of the one after, call OnReload again, before
// looking the token up anew so that no reload slips between the two.
// stop cancels the call, reporting whether it did; a stream calls it when
// it ends, so nothing is left waiting.
func (t *Tokens) OnReload(f func()) (stop func() bool) {
	t.mu.RLock()
	ctx := t.reloaded
	t.mu.RUnlock()
	if ctx == nil { // never loaded: no reload to wait for
		return func() bool { return false }
	}
	return context.AfterFunc(ctx, f)
}

func parseTokens(data []byte) (map[[sha256.Size]byte]*Grant, error) {
	var f tokenFile
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	m := make(map[[sha256.Size]byte]*Grant, len(f.Tokens))
	names := map[string]bool{}
	for i, e := range f.Tokens {
		if e.Name == "" {
			return nil, fmt.Errorf("token %d has no name", i+1)
		}
		if err := CheckName(e.Name); err != nil {
			return nil, fmt.Errorf("token %d: %w", i+1, err)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("two tokens are named %q", e.Name)
		}
		names[e.Name] = true
		raw, err := hex.DecodeString(strings.TrimPrefix(e.SHA256, "sha256:"))
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("token %q: sha256 must be 64 hex digits (harbinger token prints it)", e.Name)
		}
		if len(e.Scopes) == 0 {
			return nil, fmt.Errorf("token %q has no scopes; give it at least one, e.g. read", e.Name)
		}
		g := &Grant{Name: e.Name}
		for _, s := range e.Scopes {
			sc, err := ParseScope(s)
			if err != nil {
				return nil, fmt.Errorf("token %q: %w", e.Name, err)
			}
			g.Scopes = append(g.Scopes, sc)
		}
		var h [sha256.Size]byte
		copy(h[:], raw)
		if _, dup := m[h]; dup {
			return nil, fmt.Errorf("token %q has the same hash as another", e.Name)
		}
		m[h] = g
	}
	return m, nil
}

// Lookup returns the grant of token: ErrNoToken for an empty one,
// ErrBadToken for one not in the file.
func (t *Tokens) Lookup(token string) (*Grant, error) {
	if token == "" {
		return nil, ErrNoToken
	}
	h := sha256.Sum256([]byte(token))
	t.mu.RLock()
	defer t.mu.RUnlock()
	// Keyed by the hash: how long the lookup takes can tell an attacker at
	// most about the hash of a guess, never about a token.
	g, ok := t.byHash[h]
	if !ok {
		return nil, ErrBadToken
	}
	return g, nil
}

// Hash is how a token is written in the token file.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// TokenPrefix starts every token NewToken makes, so one found in a log or
// a repository is recognisable.
const TokenPrefix = "hbr_"

// NewToken returns a fresh random token: 160 bits, so a plain SHA-256 of it
// is as good as a slow password hash.
func NewToken() (string, error) {
	var raw [20]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	return TokenPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(raw[:])), nil
}

// FileEntry is the token file entry for a token with scopes, ready to
// paste under "tokens:". The name must pass CheckName and the scopes come
// from ParseScope: the file then reads back exactly these.
func FileEntry(name, token string, scopes []Scope) string {
	return fileEntry(name, Hash(token), scopes)
}

// fileEntry writes an entry from the token's hash. Go's quoting of valid
// UTF-8 is a YAML double-quoted string: the escapes it uses (\\, \", \t,
// \xXX below 0x80, \uXXXX, \UXXXXXXXX) mean the same in both.
func fileEntry(name, hash string, scopes []Scope) string {
	ss := make([]string, len(scopes))
	for i, s := range scopes {
		ss[i] = fmt.Sprintf("%q", s.String())
	}
	return fmt.Sprintf("  - name: %q\n    sha256: %s\n    scopes: [%s]\n", name, hash, strings.Join(ss, ", "))
}
