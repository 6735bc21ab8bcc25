package pebbledb

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// A Format is the format record of one kind of database: at Key, Magic followed by one
// byte, Version. What names the kind in errors ("store", "Raft log"); Foreign and Newer
// are the caller's errors for a database of another kind and of a newer format.
type Format struct {
	Key     []byte
	Magic   string
	Version byte
	// Oldest is the oldest version this build reads; 0: Version only. A database of a
	// version from Oldest up to Version is marked with Version at Check.
	Oldest  byte
	What    string
	Foreign error
	Newer   error
}

// Value is the record's value.
func (f Format) Value() []byte { return append([]byte(f.Magic), f.Version) }

// Check checks the format record of db in dir, writing it (synced) into a database that
// is empty: a new one, or one whose creation was interrupted before the record was
// written. A database of another kind or without the record fails with f.Foreign, one
// of a version this build does not read with f.Newer. One of an older version it reads
// is marked with f.Version (synced), so that a build that reads only the older one
// refuses it from then on.
func (f Format) Check(db *pebble.DB, dir string) error {
	v, closer, err := db.Get(f.Key)
	switch {
	case err == nil:
		if len(v) != len(f.Magic)+1 || !bytes.HasPrefix(v, []byte(f.Magic)) {
			defer closer.Close()
			return fmt.Errorf("%w: %s holds a Pebble database with a foreign format record %q", f.Foreign, dir, v)
		}
		ver := v[len(f.Magic)]
		closer.Close()
		oldest := f.Oldest
		if oldest == 0 {
			oldest = f.Version
		}
		switch {
		case ver == f.Version:
			return nil
		case ver > f.Version || ver < oldest:
			return fmt.Errorf("%w: %s holds a %s of format %d; this build reads format %d",
				f.Newer, dir, f.What, ver, f.Version)
		}
		if err := db.Set(f.Key, f.Value(), pebble.Sync); err != nil {
			return fmt.Errorf("%s: open %s: %w", f.What, dir, err)
		}
		return nil
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("%s: open %s: %w", f.What, dir, err)
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("%s: open %s: %w", f.What, dir, err)
	}
	empty := !it.First()
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("%s: open %s: %w", f.What, dir, err)
	}
	if !empty {
		return fmt.Errorf("%w: %s holds a Pebble database without a %s's format record", f.Foreign, dir, f.What)
	}
	if err := db.Set(f.Key, f.Value(), pebble.Sync); err != nil {
		return fmt.Errorf("%s: create %s: %w", f.What, dir, err)
	}
	return nil
}
