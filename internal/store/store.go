// Package store is the broker's durable state: persistent sessions with their
// subscriptions, outbound queues and inflight QoS 1/2 messages, inbound QoS 2 packet ids
// awaiting PUBREL, retained messages, and wills waiting out their delay. It keeps what the
// broker tells it, in batches that Commit applies atomically, and gives it all back to
// Load when the broker restarts.
//
// A message that several sessions queue, or that a topic retains, is stored once under
// an id and referred to by id. Counting the references, and deleting a message with its
// last one, is the broker's bookkeeping, done in memory; Load repairs what a crash leaves
// half done (see Load and the sweep below).
//
// Files: store.go the API and this description; batch.go the Batch; format.go the
// records; image.go one session's records as one byte string (a hand-over); commit.go the
// committer (group commit); load.go Load and its sweep; engine.go the choice of engine;
// lock.go one store per directory (lock_unix.go where fcntl locks exist, lock_other.go
// elsewhere); space.go what the store says when the disk is full; metrics.go the
// Prometheus series. The engines: pebble.go on Pebble (internal/pebbledb keeps Pebble from
// hanging on a full disk; nopebble.go in its place with -tags bifrost_nopebble); log_*.go
// the log engine: log_engine.go the engine, log_file.go its file, log_index.go what a
// replay of it builds, log_compact.go its compaction, log_syncdir.go and
// log_datasync_linux.go (fdatasync; log_datasync_other.go fsync) what makes it durable;
// memory.go the engine in memory.
//
// # Engine
//
// conf.Store.Engine chooses the engine on disk: pebble (the default; pebble.go, absent
// from a build with -tags bifrost_nopebble) or log (the edge profile's default;
// log_engine.go, where it is described). Each refuses a directory the other wrote, with
// ErrOtherEngine naming it. The rest of this description is the pebble engine's, except
// for the records, which both keep alike.
//
// The pebble engine keeps the records in Pebble, an LSM key-value store with a
// write-ahead log (WAL).
// A commit appends to the WAL; Pebble writes it in 32 KiB blocks and turns a full
// memtable into a sorted table in the background, so the disk sees few, large, mostly
// sequential writes: what flash wants. Tables are compressed with Snappy; zstd is never
// used (see Build).
//
// # Disk format
//
// Keys start with a byte naming the kind of record. Numbers in keys are big-endian, so
// iteration is in numeric order. A client id is prefixed with its length (2 bytes, as on
// the MQTT wire), so no client's prefix is a prefix of another's: the records of one
// client are one contiguous range, [02 len id, 02 len id ff), and DeleteSession deletes
// them all with a single range deletion.
//
//	key                                     value
//	+----+-------------+                    +---------+------+
//	| 00 | "format"    |  format version    | bifrost | v(1) |   v = formatVersion
//	+----+-------------+                    +---------+------+
//	+----+-------------+
//	| 01 | id(8)       |  message           see below
//	+----+-------------+
//	+----+--------+----+----+---------+
//	| 02 | len(2) | id | 01 |         |     session
//	| 02 | len(2) | id | 02 | seq(8)  |     queue entry (outbound, queued or inflight)
//	| 02 | len(2) | id | 03 | pid(2)  |     inbound QoS 2 packet id awaiting PUBREL
//	| 02 | len(2) | id | 04 |         |     will
//	+----+--------+----+----+---------+
//	+----+-------------+
//	| 03 | topic       |  retained          messageID(8)
//	+----+-------------+
//
// Every value starts with a record version byte (2; 1 in stores of format 1), then:
//
//	message   ver | flags(1) | expiry(8) | topicLen(uv) topic | propsLen(uv) props | payload
//	session   ver | protocol(1) | expiry(4) | disconnectedAt(8) | n(uv) n × subscription
//	              | owned(1) [userLen(uv) user | realmLen(uv) realm]   (not in version 1;
//	                the owner, when owned is 1; 0: unknown, a session of format 1)
//	          subscription = filterLen(uv) filter | options(1) | subscriptionID(uv)
//	queued    ver | messageID(8) | flags(1) | state(1) | packetID(2) | n(uv) n × subID(uv)
//	inbound   ver
//	retained  ver | messageID(8)
//	will      ver | flags(1) | delay(4) | messageExpiry(4) | deadline(8)
//	              | topicLen(uv) topic | propsLen(uv) props | payload
//
// (uv) is an unsigned varint; fixed-size integers are big-endian; times are Unix
// nanoseconds (int64), intervals seconds. flags holds the QoS in bits 0-1 and the retain
// flag in bit 2; a subscription's options byte is laid out as in an MQTT 5 SUBSCRIBE
// (QoS bits 0-1, No Local bit 2, Retain As Published bit 3, Retain Handling bits 4-5).
// The payload runs to the end of the value, so it needs no length.
//
// The format-version record is written when the directory is created and checked by
// every Open: a directory that holds something other than a bifrost store, a store of a
// newer format, or a corrupt one, is refused with an error naming it (ErrForeign,
// ErrVersion, or Pebble's); one that another store holds, in this process or another, with
// ErrInUse naming the holder (lock.go). A directory with files but no Pebble database is refused
// before Pebble touches it, since Pebble deletes files that look like its obsolete ones;
// a foreign Pebble database is opened at its own Pebble format, so that nothing but
// Pebble's recovery writes to it. A build reads every record version up to its own; formatVersion rises only when a
// build writes what an older one cannot read, so that the older one refuses at Open
// instead of failing half-way through Load. A store of an older format that this build
// reads (oldestFormat and up) is marked with this build's format at Open, before anything
// is written to it.
//
// Format 2 added the session's owner (the identity whose CONNECT made it) to the session
// record. A session record of format 1 has none: the broker lets no identity inherit
// such a session, and the first CONNECT of its client id starts clean.
//
// # Sync policies and what a crash loses
//
// conf.Store.Sync decides when Commit reports a batch durable, which is when the broker
// may acknowledge the PUBLISH it carries:
//
//   - always: after the WAL is fsynced. Neither a process crash nor a power loss loses an
//     acknowledged batch. Group commit (commit.go) makes one fsync cover every batch that
//     arrived while the previous one ran, so throughput holds with many publishers.
//   - interval: once the batch is in Pebble's WAL buffer. The first write after an
//     fsync arms a timer, and SyncInterval later the committer fsyncs the WAL (with the
//     group it writes then, or alone). A process crash or a power loss loses up to the
//     last SyncInterval of acknowledged batches (plus the time one fsync takes): Pebble
//     keeps the WAL's current 32 KiB block in process memory until it fills or a sync
//     is requested. An idle store does not wake up.
//   - none: as interval, with no fsync at all. A process crash loses the acknowledged
//     batches in the current WAL block (under 32 KiB); a power loss also loses what the
//     OS has not yet written back (on Linux dirty pages live up to 30 s by default).
//
// Close makes everything durable under every policy.
//
// # Failures
//
// A commit that fails (a full disk, an I/O error) reports the error to every done of its
// group: none of those batches may be acknowledged, though some may turn out to be on
// disk after a restart. The error matches ErrWrite, and ErrNoSpace when the disk is full.
// Pebble treats a failed WAL write or fsync as fatal for the open database (after a
// failed fsync the page cache can no longer be trusted), so the store closes it and
// opens the directory again, replaying the WAL, before its next commit; until that
// succeeds (tried at most once a second) commits fail fast. While Pebble cannot write
// its tables (a flush or compaction failed on the file system), commits fail fast too:
// Pebble would hold them until a flush succeeds. When space returns, the store works
// again without a restart. An Open that must write the WAL it replays into a table and
// cannot (a full disk) fails at once with ErrNoSpace, naming the directory and the space
// (internal/pebbledb, open.go), and so does one with less than pebbledb.OpenRoom (256
// KiB) free, before Pebble writes a new MANIFEST; a reopen waits for that beside the WAL
// it replays. The log engine opens on a full disk, and its commits fail until space
// returns. Under interval and none, Pebble writes the WAL in
// the background, so a failure surfaces at the next commit or fsync, and acknowledged
// batches that were not yet written are lost, as a crash would lose them. A failure
// that Pebble hits in the background on its MANIFEST stops the process as Pebble
// intends (while running, on a disk that fills: a flush whose table fits and whose
// MANIFEST edit does not, a compaction that only moves or deletes tables); a restart
// recovers from the WAL.
//
// # Memory and goroutines
//
// Pebble's block cache (CacheSize) and memtable (MemtableSize) come from conf, 256 KiB
// each in the edge profile. Pebble starts with a memtable of at most 256 KiB, doubling up
// to MemtableSize, and keeps two or three of them (the one filling, one being flushed,
// one recycled for the next). That memory is Pebble's manual memory: C's malloc in a cgo
// build, the Go heap otherwise, where the GC lets it count twice (GOGC=100 lets the heap
// grow to twice what is live), so the memtable size weighs three to six times its value
// in RSS; the edge profile's 256 KiB instead of 1 MiB saved about 3.4 MiB (see
// docs/benchmarks.md). The block cache fills only when the store is read, at Load.
// Pebble runs five goroutines of its own when idle (WAL flushing, cleaning obsolete
// files, and so on, more during a compaction); the store adds one, the committer, and
// under interval a timer armed only while a write awaits its fsync. Measured by
// TestMemoryFloor with the edge settings, an opened store with a few records adds about
// 0.6 MiB of RSS (2.3 MiB when built without cgo), and about 2.6 MiB (4.7 MiB) once
// 8 MiB have been written and read back.
//
// # Build
//
// Pebble links a cgo zstd (github.com/DataDog/zstd) when cgo is enabled, and a pure-Go
// one (klauspost/compress) when cgo is off or the build tag pebblegozstd is set. A module
// cannot set build tags, so a plain `go test -race ./...` (the race detector needs cgo
// anyway) compiles the C zstd once, a minute or two, cached afterwards. Release builds
// should use CGO_ENABLED=0 or `-tags pebblegozstd`; CI may set
// GOFLAGS=-tags=pebblegozstd to skip the C compile. The store never compresses with zstd
// (tables use Snappy), so every build reads and writes the same files.
package store

import (
	"errors"
	"log/slog"
	"syscall"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// Store is the broker's durable state. Its methods are safe for concurrent use, except
// that Load runs once, before the first Commit.
type Store interface {
	// Commit applies b atomically and then calls done, with nil once b is durable under
	// the sync policy (see the package doc) or with the error that prevented it. done
	// runs on the store's committer goroutine, once per Commit, in Commit order; it must
	// not block and must not call Commit (the queue it would wait on drains only after
	// done returns). b belongs to the store until done is called.
	//
	// Commit blocks while the queue of batches waiting for the committer holds more than
	// the queue bound (see commit.go): that is the broker's backpressure, it stops reading
	// from publishers. After Close, done is called with ErrClosed on a new goroutine.
	Commit(b *Batch, done func(error))
	// Load calls v for every record, in the order described at Visitor, first deleting
	// what a crash left unreferenced (see Visitor). It stops at the first error v
	// returns, and returns it.
	Load(v Visitor) error
	// Close commits what is queued, makes everything durable and releases the store.
	// Commits that arrive during or after Close fail with ErrClosed.
	Close() error
}

// A Visitor receives the records at Load. Load visits every message first, so that each
// queue entry and retained topic refers to a message already visited (except a released
// queue entry, which needs only its packet id and may outlive its message); then the
// clients in key order, each as its session followed by its queue entries in seq order,
// its inbound packet ids in order and its will; then the retained topics in key order.
//
// Slices in records (Topic, Payload, Props, SubIDs, Subscriptions) are valid only until
// the method returns: copy what you keep. Strings are the visitor's.
//
// Load sweeps away, and does not visit:
//   - records of a client that has no session record;
//   - queue entries that refer to a missing message, or, still unsent (StateQueued), to
//     an expired one: an expired message is dropped for the subscribers whose delivery
//     has not started, Spec [MQTT-3.3.2-5], and completed for the others (an
//     ExpiryVisitor is told of each entry dropped so);
//   - retained topics whose message is missing or expired;
//   - messages that no queue entry or retained topic refers to, and expired messages
//     that no sent or released queue entry refers to.
//
// So what a crash between the broker's batches leaves behind, or a message that expired
// while the broker was down, does not stay on disk forever. Load does not expire
// sessions: one that expired while the broker was down may have a will to publish, and
// that is the broker's call (it publishes, then deletes the session).
type Visitor interface {
	Message(id uint64, r MessageRecord) error
	Session(r SessionRecord) error
	Queued(clientID string, seq uint64, r QueuedRecord) error
	Inbound(clientID string, pid uint16) error
	Will(clientID string, r WillRecord) error
	Retained(topic string, messageID uint64) error
}

// An ExpiryVisitor is a Visitor that Load also tells of each queue entry it sweeps
// because its message expired before the entry's delivery began: a message dropped for
// that client [MQTT-3.3.2-5], which the broker counts. Expired comes where Queued would
// have: after the client's session record, in seq order among its entries.
type ExpiryVisitor interface {
	Visitor
	Expired(clientID string, seq uint64) error
}

// NeverExpire is the SessionRecord.Expiry of a session that never expires.
const NeverExpire = ^uint32(0)

// A SessionRecord is a persistent session: everything of a client that outlives its
// connection except its queue, inbound ids and will, which have records of their own.
type SessionRecord struct {
	ClientID      string
	Subscriptions []SubRecord
	// DisconnectedAt is when the client disconnected; 0 if it was connected when the
	// broker stopped, which the broker treats as disconnected at Load.
	DisconnectedAt int64
	Expiry         uint32 // Session Expiry Interval, seconds; NeverExpire for never
	Version        byte   // protocol level of the client's CONNECT: 3, 4 or 5
	// Owned says the record names the identity that owns the session: Username, under
	// the auth configuration Realm names (the broker's: "" the top-level auth block, else
	// the listener with its own). Records of format 1 have no owner.
	Owned    bool
	Username string
	Realm    string
}

// A SubRecord is one subscription of a session.
type SubRecord struct {
	Filter            string // as subscribed, with any $share/{group}/ prefix
	ID                uint32 // Subscription Identifier; 0 for none
	QoS               byte   // maximum QoS granted
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    byte
}

// A MessageRecord is an application message, stored once however many queue entries and
// retained topics refer to it.
type MessageRecord struct {
	Topic   []byte
	Payload []byte
	Props   []byte // MQTT 5 properties passed through to subscribers, encoded
	Expiry  int64  // when the message expires, Unix ns; 0 for never
	QoS     byte   // as published
	Retain  bool   // as published
}

// QueuedState is where a queue entry is in its delivery flow. The values are stored:
// append new ones, never renumber.
type QueuedState byte

// States of a queue entry.
const (
	StateQueued   QueuedState = 0 // waiting to be sent
	StateSent     QueuedState = 1 // PUBLISH sent, awaiting PUBACK (QoS 1) or PUBREC (QoS 2)
	StateReleased QueuedState = 2 // PUBREL sent, awaiting PUBCOMP
)

// A QueuedRecord is one entry of a session's outbound queue: a message waiting to be sent
// or in flight, with what this recipient's copy carries.
type QueuedRecord struct {
	MessageID uint64
	SubIDs    []uint32 // Subscription Identifiers of the matching subscriptions
	PacketID  uint16   // 0 until sent
	QoS       byte     // as delivered: the lower of the message's and the subscription's
	Retain    bool     // retain flag as delivered
	State     QueuedState
}

// A WillRecord is a session's will message, with its delay.
type WillRecord struct {
	Topic   []byte
	Payload []byte
	Props   []byte // MQTT 5 properties passed through to subscribers, encoded
	// Deadline is when the will is due, Unix ns: the disconnect plus Delay. 0 if the
	// client was connected when the broker stopped: the will is then due Delay after Load.
	Deadline      int64
	Delay         uint32 // Will Delay Interval, seconds
	MessageExpiry uint32 // Message Expiry Interval, seconds, from publication; 0 for none
	QoS           byte
	Retain        bool
}

// Errors of the store. Commit errors match ErrWrite, and ErrNoSpace too when the disk is
// full; errors from Open name the directory.
var (
	ErrClosed  = errors.New("store: closed")
	ErrWrite   = errors.New("store: write failed")
	ErrNoSpace = errors.New("store: no space left on device")
	ErrForeign = errors.New("store: not a bifrost store")
	ErrVersion = errors.New("store: unsupported format version")
	ErrInUse   = errors.New("store: directory in use") // by another open store, of this process or another
	ErrCorrupt = errors.New("store: corrupt record")
	// ErrOtherEngine: the directory holds a store of the engine that store.engine does
	// not name.
	ErrOtherEngine = errors.New("store: written by another engine")
)

// A writeError is a failed commit. It matches ErrWrite, ErrNoSpace when the cause is a
// full disk, and its cause.
type writeError struct{ cause error }

func (e *writeError) Error() string { return "store: write failed: " + e.cause.Error() }
func (e *writeError) Unwrap() error { return e.cause }

func (e *writeError) Is(target error) bool {
	return target == ErrWrite || target == ErrNoSpace && errors.Is(e.cause, syscall.ENOSPC)
}

// Open opens the store in cfg.Dir, creating the directory and the store if need be.
// Zero fields of cfg other than Dir take conf's defaults. log receives Pebble's
// messages and the store's own.
func Open(cfg conf.Store, log *slog.Logger) (Store, error) {
	s, err := openEngine(cfg, log)
	if err != nil {
		return nil, err // not a nil *store in a non-nil Store
	}
	return s, nil
}

// NewMemory returns a Store that keeps everything in memory, for tests: it behaves as
// Open's under sync: always, except that nothing survives the process. Its commits are
// grouped and reported on a committer goroutine, as on disk.
func NewMemory() Store {
	return newStore(newMemEngine(), syncAlways, 0, defaultQueueBytes, slog.New(slog.DiscardHandler))
}
