// Package pubsub holds the topic index that every PUBLISH is matched against, with its
// shared subscription groups, and the retained-message store.
//
// # Layout
//
// Both the Index and the Retained store are built on one tree: a trie of topic levels with
// path compression. A node's label is one or more literal levels ("devices", "42/cmd"); a
// '+' or '#' level is always a node of its own. Its state is plain integers in pages, so
// that the garbage collector has nothing to scan however many entries it holds:
//
//	node pages   4,096 nodes of 32 bytes (parent, first child, siblings, label, payload),
//	             addressed by uint32 id, with the label bytes of those nodes (nodes.go)
//	table        extendible hash table: (parent id, first level of label) → child id, each
//	             slot the 32-bit hash beside the id, so probes rarely touch a node (table.go)
//	slab pages   (Index) the subscriptions of the nodes of each node page and of their
//	             shared groups, one block of 2^k Subs per owner, so that Match copies a
//	             node's subscribers with one append (slab.go)
//
// A subscription to "devices/{n}/cmd" thus costs one node, a table slot, its label bytes
// and 12 bytes of Sub: about 70 bytes, none of them behind a pointer (measured: 73 B and
// 0.07 scannable bytes per subscription at 1M). A Go map with string keys costs ~46 bytes
// an entry before its values and is scanned by every GC; a map of pointers per level, as in
// nats sublist.go or mochi's topics.go, makes mark work grow with the subscription count.
//
// # Invariants
//
//   - Children of one node differ in their first level: the table key (parent, first level)
//     is unique, and matching takes one probe per node on the path.
//   - Every non-root node carries a payload (subscriptions, a shared group, a retained
//     value) or has children. A literal node without payload has two or more children, or a
//     wildcard child: removal merges a node into its only literal child, insertion splits a
//     label where a new filter leaves it. The tree is thus the same whatever the order of the
//     operations that built it, and it holds no empty nodes.
//   - Garbage is bounded, and given back in bounded steps: no operation takes time in
//     proportion to the size of the index. Freed node ids go to a free list; while free ids
//     outnumber half the live ones, each write moves a few nodes from the end of the id
//     space into free slots and gives back the pages it empties. A page whose label bytes
//     or Subs are more than half dead is rewritten alone. The table never rehashes more
//     than one segment. Rejected: a map and a list, deleted lazily and rebuilt past a
//     threshold, which pays a map entry and a list element per subscription, and a pause in
//     proportion to the index at each rebuild (a rebuild of this tree at 1M took 150 ms
//     here, where its worst write takes a few milliseconds, most of them the machine's).
//
// # Locking
//
// An Index and a Retained each have one sync.RWMutex: Match, Pick, GroupName, GroupOf,
// Walk, Get and Len take it shared and run concurrently with each other; Subscribe,
// Unsubscribe, Set and Delete take it exclusively. Callbacks (Pick's accept,
// Retained.Match's fn, Walk's fn) run under the shared lock and must not call the modifying
// methods of the same value. pubsub's locks are leaves: nothing here calls out while holding
// them except those callbacks.
package pubsub

// SubscriberID is the broker's small integer handle for a session (never 0).
type SubscriberID uint32

// Sub is one subscription as the index stores it: 12 bytes, no pointers, so that a node's
// subscribers are one contiguous run the GC never scans.
type Sub struct {
	Subscriber SubscriberID
	ID         uint32 // MQTT 5 subscription identifier; 0 = none
	QoS        uint8  // maximum QoS granted
	Flags      uint8  // NoLocal | RetainAsPublished | CheckRead
}

// Subscription option flags of Sub.Flags (MQTT 5 section 3.8.3.1).
const (
	NoLocal           uint8 = 1 << iota // do not send the subscriber its own messages [MQTT-3.8.3-3]
	RetainAsPublished                   // keep the RETAIN flag of forwarded messages [MQTT-3.3.1-12]
	// CheckRead is the broker's, not MQTT's: the ACL does not let the subscriber read
	// every topic the filter matches, so each delivery is checked.
	CheckRead
)
