// Package raftstore is the cluster's durable Raft log: hashicorp/raft's LogStore on a
// Pebble database of its own, in a directory of the cluster's data directory (never the
// broker's store), and its StableStore in a small file of fixed size beside it.
//
// Files: doc.go this description; store.go the Store; format.go the records;
// pebble.go opening the database; stable.go the stable file; failures.go what the Store
// does after a failed write and on a full disk; committer.go the goroutine that applies
// writes, so that one Pebble stalls can be given up.
//
// # Durability
//
// StoreLog, StoreLogs, DeleteRange, Set and SetUint64 return once their write is synced
// (pebble.Sync: the WAL is fsynced; Set and SetUint64: the stable file is fsynced), as
// raft requires: a node acknowledges an entry to the leader, or votes, only after
// StoreLogs or SetUint64 returned. StoreLogs writes all
// its entries in one Pebble batch, one fsync. Writes are serialised (raft writes from its
// main loop, and calls DeleteRange from its snapshot goroutine); reads run concurrently
// with them. FirstIndex and LastIndex read two cached values, which Open reads from the
// database and every write updates once it is durable; a DeleteRange that moves a bound
// reads the new bound back, since raft.LogStore allows gaps (a follower that installed a
// snapshot keeps its older entries).
//
// A missing log entry is raft.ErrLogNotFound. A missing stable key is the zero value and
// no error (nil from Get, 0 from GetUint64), as raft.StableStore says; raft also accepts
// the error "not found" that raft-boltdb returns, and refuses to start on any other.
//
// # Disk format
//
// Keys start with a byte naming the kind of record. Indexes in keys are big-endian, so
// iteration is in log order and the log is one contiguous key range.
//
//	key                            value
//	+----+----------+              +--------------+------+
//	| 00 | "format" | format       | bifrost-raft | v(1) |   v = formatVersion (2)
//	+----+----------+              +--------------+------+
//	+----+----------+
//	| 01 | index(8) | log entry    ver | type(1) | flags(1) | term(uv) | [appendedAt(8)]
//	+----+----------+                  | extLen(uv) extensions | data
//	+----+----------+
//	| 02 | key      | stable value ver | value    (format 1 only: moved to the stable file)
//	+----+----------+
//
// The stable file, "stable" in the same directory (Pebble ignores the files it does not
// name), holds the stable values: 8 KiB, two slots of 4 KiB, each written whole. Its
// numbers are big-endian; (uv) is an unsigned varint.
//
//	slot  +------------------+-----+---+--------+--------+---------+-------------+-------+
//	      | "bifrost-stable" | v=1 | 0 | seq(8) | len(4) | crc(4)  | values(len) | zeros |
//	      +------------------+-----+---+--------+--------+---------+-------------+-------+
//	      0                  14    15  16       24       28        32
//	values: (keyLen(uv) key valLen(uv) val)*, in key order
//
// crc is the CRC-32C of the 28 bytes before it and the values. A write fills the slot
// that does not hold the newest (the highest seq of the intact slots) with seq+1 and
// every value, and fsyncs it; the newest is read at Open. A slot cut short by a crash
// fails its checksum, and the other holds the values of the write before, which was
// acknowledged when this one was not. The file is written whole when it is created,
// through a temporary file renamed over it, so that later writes overwrite blocks it
// has: on a file system that writes in place (ext4, XFS, tmpfs) saving raft's term and
// vote needs no space, and a full disk does not stop it (hashicorp/raft stops the process
// when it cannot save its term). A copy-on-write file system (btrfs, ZFS) needs new
// blocks for any write, this one too.
//
// ver is the record version (1); type is raft.LogType; flags bit 0 says an appendedAt
// follows: raft.Log.AppendedAt in Unix nanoseconds (int64, big-endian), absent for the
// zero time. (uv) is an unsigned varint. Data runs to the end of the value, so it needs
// no length. The index is the key's only. Every constant is append-only (format.go).
//
// The format record is written when the directory is created and checked by every
// Open: a Pebble database without it (such as the broker's store, whose record differs)
// is refused with ErrForeign, one of a newer format with ErrVersion. A build reads every
// record version up to its own; formatVersion rises only when a build writes what an
// older one cannot read. A record that does not decode is an error matching ErrCorrupt,
// never a panic; Pebble checksums its WAL and tables beneath.
//
// Format 2 keeps the stable values in the stable file. Open creates the file for a new
// log, and for one of format 1 with the values its Pebble database holds, replacing any
// file there (an open that stopped half-way); then one synced batch deletes those values
// and writes format 2, so that a crash in between leaves the log of format 1, moved again
// at the next open, and a build of format 1 refuses the log once its values have moved.
// An Open that cannot create the file fails with ErrNoSpace on a full disk, and leaves the
// log as it was. A log of format 2 without its file, or with neither slot intact, is
// refused with ErrCorrupt: without its vote a node could vote twice in a term.
//
// # Failures
//
// Pebble treats a failed WAL write or fsync as fatal for the open database: its commit
// pipeline cannot be trusted after it (after a failed fsync the page cache cannot be
// either). The write that hit it returns an error wrapping Pebble's (ErrNoSpace on a
// full disk, else ErrBroken), and so does every later write without entering Pebble
// until the Store has reopened the database: at a write at least a second later, once
// the file system has room for what the reopen writes (Pebble writes the WAL it replays
// into a table). Reads go on meanwhile. What the failed write held may be visible to
// GetLog (Pebble applies a batch before its sync returns), never to LastIndex, and may or
// may not be there after the reopen or a restart, like any write that was not
// acknowledged. A failure Pebble hits in the background on its MANIFEST stops the
// process, as Pebble intends (internal/pebbledb); a restart recovers from the WAL.
//
// On a full disk (internal/pebbledb, open.go, "Pebble on a full disk") nothing waits for
// space:
//
//   - Open fails at once with ErrNoSpace, naming the directory, what it was doing, the
//     space that needs and the space there is: when the file system has less than
//     pebbledb.OpenRoom (256 KiB) free, and when Pebble's write of the replayed WAL into a
//     table fails (the open goes on in the background, and closes the database once
//     space lets it complete).
//   - While Pebble cannot write its tables (a flush or a compaction failed on the file
//     system), writes fail at once with ErrNoSpace (refuse): Pebble retries once a
//     second, and would hold a write until a flush succeeds. A write let in just before
//     that Pebble stalls is given up when the flush fails, and writes fail until it has
//     returned (committer.go).
//   - A reopen whose table does not fit after all is left pending: reads fail too until
//     it completes.
//
// Set and SetUint64 write the stable file, not the database: they go on while the disk
// is full and while the database is broken or reopening. Once space is freed the Store
// works again by itself, within about a second. Raft treats a failed write as it should:
// a follower does not acknowledge the entries, and the leader sends them again, backing
// off up to about 10 s; a leader fails the entries it was appending (their Apply
// returns the error, though they may still be committed later, as after a lost
// leadership) and steps down. A node whose disk is full takes part in elections: it
// saves each new term and vote in place (hashicorp/raft panics when it cannot save its
// term). raft still panics when it cannot read an entry it has committed, as after a
// reopen left pending (docs/cluster.md, "When the disk is full").
//
// # Why Pebble
//
// Pebble is in the binary already (the broker's store), with its failure handling
// (internal/pebbledb); hashicorp/raft-wal v0.4.0 calls itself experimental and brings
// bbolt, etcd v3.3 and armon/go-metrics, and raft-boltdb's B+tree fsyncs twice per append
// and keeps the pages a compaction frees. Measured with bench/raftlog (ext4, median of
// 3), one synced StoreLogs of 1 and of 64 entries of 100 B takes 212 and 197 µs here, 111
// and 221 µs on raft-wal, 319 and 632 µs on raft-boltdb, with 0 and 2 allocations against
// 8 and 386, 87 and 1,876; GetLog of 100 B takes 0.9 µs against 4.0 and 4.8 µs (of 1 KiB
// from a 4 MiB log, past the 1 MiB cache below: 11.5 µs against 5.3 and 4.5).
//
// # Memory
//
// Pebble's block cache is 1 MiB and its memtable up to 4 MiB (it starts at 256 KiB and
// doubles as writes demand): the log is small entries read back while recent, from the
// memtable; only a follower catching up reads tables.
package raftstore
