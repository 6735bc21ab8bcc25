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
	Oldest byte
	// Upgrade, if not nil, is called by Check before it writes the record: with from 0
	// for an empty database, with the version found for one it marks with Version. What
	// it adds to b is committed with the record, in one synced batch, so that a crash
	// leaves the database as it was or upgraded, never half-way.
	Upgrade func(db *pebble.DB, from byte, b *pebble.Batch) error
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
// refuses it from then on. f.Upgrade's error is returned as it is.
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
		return f.write(db, ver, "open", dir)
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
	return f.write(db, 0, "create", dir)
}

// write writes the record into db, of version from (0: none), with what f.Upgrade adds.
func (f Format) write(db *pebble.DB, from byte, op, dir string) error {
	b := db.NewBatch()
	defer b.Close()
	if f.Upgrade != nil {
		if err := f.Upgrade(db, from, b); err != nil {
			return err
		}
	}
	if err := b.Set(f.Key, f.Value(), nil); err != nil {
		return fmt.Errorf("%s: %s %s: %w", f.What, op, dir, err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("%s: %s %s: %w", f.What, op, dir, err)
	}
	return nil
}
