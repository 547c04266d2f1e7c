package broker

// Health is whether the broker takes work, and why not: what a load
// balancer's check (/healthz) asks.
type Health struct {
	// Draining is set once Shutdown has begun: the broker takes no new
	// work and hands out none.
	Draining bool
	// StoreError, when set, is why the log refuses records (a full disk, a
	// failed fsync): the file store then refuses every later record, so
	// every publish is refused until the broker restarts on a disk that
	// takes writes.
	StoreError string
}

// OK reports whether the broker takes publishes and hands out jobs.
func (h Health) OK() bool { return !h.Draining && h.StoreError == "" }

// Reason says in a line why the broker is not OK; empty when it is.
func (h Health) Reason() string {
	switch {
	case h.Draining:
		return "draining"
	case h.StoreError != "":
		return "log failed: " + h.StoreError
	}
	return ""
}

// Health reports whether the broker takes work. It asks the store as it
// is now: the Store interface answers through Append, and an append of
// no records writes nothing and returns the error of a store that has
// failed (the file store refuses every append after a write or an fsync
// failed). A record the log refused earlier counts too, though the store
// may take records again: what was refused is missing from the log.
func (b *Broker) Health() Health {
	h := Health{Draining: b.draining.Load()}
	if st := b.cfg.Store; st != nil {
		if _, err := st.Append(); err != nil {
			h.StoreError = err.Error()
		} else if b.storeFailed.Load() {
			h.StoreError = "the log refused records since the broker started (the broker's log says why); restart the broker to make it whole"
		}
	}
	return h
}
