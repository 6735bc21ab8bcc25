package store

import (
	"bytes"
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// Load reads the store in four passes over the key space (see Visitor for what it
// visits and sweeps):
//
//  1. the clients and retained topics, collecting the message ids they refer to, and for
//     each whether a delivery has begun (a sent or released queue entry): sorted, these
//     are refs;
//  2. the messages, in id order alongside refs: a message is kept if it is referred to
//     and either unexpired or in delivery; kept ones are visited and listed in live, the
//     referred ones swept for their expiry in expired;
//  3. the clients again, visiting what refers to a live message (or needs none);
//  4. the retained topics, likewise.
//
// Passes 1 and 3 read the same records twice; in exchange the visitor meets every
// message before anything that refers to it, and the sweep needs only two sorted id
// lists in memory (16 bytes per reference, 16 per kept message) instead of the records.
// The sweep's deletions are committed after each pass, with no iterator open: a failed
// commit closes and reopens the database.
func (s *store) Load(v Visitor) error {
	l := loader{s: s, v: v, now: time.Now().UnixNano()}
	l.ev, _ = v.(ExpiryVisitor)
	if w, ok := s.eng.(loadWatcher); ok {
		w.loading()
		defer w.loaded()
	}
	if err := l.load(); err != nil {
		return err
	}
	if l.swept > 0 {
		s.log.Info("store: swept unreferenced and expired records at load",
			slog.Int("messages", l.sweptMessages), slog.Int("records", l.swept-l.sweptMessages))
	}
	return nil
}

type loader struct {
	s   *store
	v   Visitor
	now int64

	refs    []ref     // pass 1: referenced ids, sorted, one per id
	live    []liveMsg // pass 2: kept messages, sorted by id
	expired []uint64  // pass 2: referenced messages swept as expired, sorted
	ev      ExpiryVisitor

	sweep         Batch
	swept         int // records deleted, messages included
	sweptMessages int

	// Records decoded in turn, reusing their slices.
	session SessionRecord
	queued  QueuedRecord
	message MessageRecord
	will    WillRecord
}

// A ref is a message id referred to by queue entries or retained topics; started if a
// delivery of it has begun (a sent or released queue entry).
type ref struct {
	id      uint64
	started bool
}

// A liveMsg is a message that pass 2 kept.
type liveMsg struct {
	id      uint64
	expired bool // kept only for the deliveries under way
}

func (l *loader) load() error {
	if err := l.collectRefs(); err != nil {
		return err
	}
	if err := l.messages(); err != nil {
		return err
	}
	l.refs = nil
	if err := l.commitSweep(); err != nil {
		return err
	}
	if err := l.clients(); err != nil {
		return err
	}
	if err := l.commitSweep(); err != nil {
		return err
	}
	if err := l.retained(); err != nil {
		return err
	}
	return l.commitSweep()
}

// collectRefs is pass 1.
func (l *loader) collectRefs() error {
	err := l.eachClient(func(it iterator, k clientKey, v []byte) error {
		if k.kind != kindQueued {
			return nil
		}
		if err := decodeQueued(v, &l.queued); err != nil {
			return corrupt("client %q queue entry %d: %v", k.id, k.seq, err)
		}
		l.refs = append(l.refs, ref{l.queued.MessageID, l.queued.State != StateQueued})
		return nil
	}, false)
	if err != nil {
		return err
	}
	err = l.each(retainedLower, keysUpper, func(it iterator, k, v []byte) error {
		id, err := decodeRetained(v)
		if err != nil {
			return corrupt("retained topic %q: %v", k[1:], err)
		}
		l.refs = append(l.refs, ref{id: id})
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(l.refs, func(a, b ref) int { return cmp.Compare(a.id, b.id) })
	// Merge the references to each id.
	out := l.refs[:0]
	for _, r := range l.refs {
		if n := len(out); n > 0 && out[n-1].id == r.id {
			out[n-1].started = out[n-1].started || r.started
			continue
		}
		out = append(out, r)
	}
	l.refs = out
	return nil
}

// messages is pass 2.
func (l *loader) messages() error {
	refs := l.refs
	return l.each(messageLower, clientLower, func(it iterator, k, v []byte) error {
		id, err := parseMessageKey(k)
		if err != nil {
			return corrupt("message key %x: %v", k, err)
		}
		for len(refs) > 0 && refs[0].id < id {
			refs = refs[1:]
		}
		expiry, err := messageExpiry(v)
		if err != nil {
			return corrupt("message %d: %v", id, err)
		}
		expired := expiry != 0 && expiry <= l.now
		referred := len(refs) > 0 && refs[0].id == id
		if !referred || expired && !refs[0].started {
			if referred && l.ev != nil {
				l.expired = append(l.expired, id)
			}
			l.sweptMessages++
			return l.delete(k)
		}
		if err := decodeMessage(v, &l.message); err != nil {
			return corrupt("message %d: %v", id, err)
		}
		l.live = append(l.live, liveMsg{id, expired})
		return l.v.Message(id, l.message)
	})
}

// clients is pass 3.
func (l *loader) clients() error {
	var clientID string
	return l.eachClient(func(it iterator, k clientKey, v []byte) error {
		switch k.kind {
		case kindSession:
			clientID = string(k.id)
			if err := decodeSession(v, &l.session); err != nil {
				return corrupt("client %q session: %v", k.id, err)
			}
			l.session.ClientID = clientID
			return l.v.Session(l.session)
		case kindQueued:
			if err := decodeQueued(v, &l.queued); err != nil {
				return corrupt("client %q queue entry %d: %v", k.id, k.seq, err)
			}
			m, ok := l.lookup(l.queued.MessageID)
			switch {
			case l.queued.State == StateReleased: // needs only its packet id
			case !ok && l.queued.State == StateQueued && l.sweptExpired(l.queued.MessageID),
				ok && m.expired && l.queued.State == StateQueued:
				if l.ev != nil {
					if err := l.ev.Expired(clientID, k.seq); err != nil {
						return err
					}
				}
				return l.delete(it.Key())
			case !ok:
				return l.delete(it.Key())
			}
			return l.v.Queued(clientID, k.seq, l.queued)
		case kindInbound:
			if err := decodeInbound(v); err != nil {
				return corrupt("client %q inbound %d: %v", k.id, k.pid, err)
			}
			return l.v.Inbound(clientID, k.pid)
		case kindWill:
			if err := decodeWill(v, &l.will); err != nil {
				return corrupt("client %q will: %v", k.id, err)
			}
			return l.v.Will(clientID, l.will)
		}
		return nil
	}, true)
}

// retained is pass 4.
func (l *loader) retained() error {
	return l.each(retainedLower, keysUpper, func(it iterator, k, v []byte) error {
		id, err := decodeRetained(v)
		if err != nil {
			return corrupt("retained topic %q: %v", k[1:], err)
		}
		if m, ok := l.lookup(id); !ok || m.expired {
			return l.delete(k)
		}
		return l.v.Retained(string(k[1:]), id)
	})
}

// sweptExpired reports whether pass 2 swept message id, referred to, for its expiry.
func (l *loader) sweptExpired(id uint64) bool {
	_, ok := slices.BinarySearch(l.expired, id)
	return ok
}

func (l *loader) lookup(id uint64) (liveMsg, bool) {
	i, ok := slices.BinarySearchFunc(l.live, id, func(m liveMsg, id uint64) int { return cmp.Compare(m.id, id) })
	if !ok {
		return liveMsg{}, false
	}
	return l.live[i], true
}

// eachClient calls f for every record of every client that has a session, skipping the
// others, whose records it sweeps if sweep is set.
func (l *loader) eachClient(f func(it iterator, k clientKey, v []byte) error, sweep bool) error {
	it, err := l.s.eng.iter(clientLower, retainedLower)
	if err != nil {
		return err
	}
	valid := it.First()
	for valid {
		k, err := parseClientKey(it.Key())
		if err != nil {
			return closeIter(it, corrupt("client key %x: %v", it.Key(), err))
		}
		if k.kind != kindSession {
			// The session record sorts first: this client has none.
			upper := clientUpper(nil, k.prefix)
			if sweep {
				l.sweep.deleteRange(k.prefix, upper)
				l.swept++
			}
			valid = it.SeekGE(upper)
			continue
		}
		// The session and the rest of this client.
		prefix := append([]byte(nil), k.prefix...)
		for valid && bytes.HasPrefix(it.Key(), prefix) {
			if k, err = parseClientKey(it.Key()); err != nil {
				return closeIter(it, corrupt("client key %x: %v", it.Key(), err))
			}
			v, err := it.ValueAndErr()
			if err != nil {
				return closeIter(it, err)
			}
			if err := f(it, k, v); err != nil {
				return closeIter(it, err)
			}
			valid = it.Next()
		}
	}
	return closeIter(it, nil)
}

// each calls f for every key in [lower, upper).
func (l *loader) each(lower, upper []byte, f func(it iterator, k, v []byte) error) error {
	it, err := l.s.eng.iter(lower, upper)
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return closeIter(it, err)
		}
		if err := f(it, it.Key(), v); err != nil {
			return closeIter(it, err)
		}
	}
	return closeIter(it, nil)
}

func closeIter(it iterator, err error) error {
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	return err
}

// delete sweeps the record at k.
func (l *loader) delete(k []byte) error {
	l.sweep.deleteKey(k)
	l.swept++
	return nil
}

// commitSweep commits the deletions of a pass.
func (l *loader) commitSweep() error {
	if l.sweep.Len() == 0 {
		return nil
	}
	if err := l.s.commitWait(&l.sweep); err != nil {
		if e := noSpace("load", l.s.dir, fmt.Sprintf("deleting what a crash or expiry left behind (%d records)", l.sweep.Len()),
			uint64(l.sweep.Size()), err); e != err {
			return e
		}
		return fmt.Errorf("store: load: sweep: %w", err)
	}
	l.sweep.Reset()
	return nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
