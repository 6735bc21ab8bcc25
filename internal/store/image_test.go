package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// imageLog is a Visitor that writes down what it is given.
type imageLog []string

func (l *imageLog) Message(id uint64, r MessageRecord) error {
	*l = append(*l, fmt.Sprintf("message %d %s %q q%d", id, r.Topic, r.Payload, r.QoS))
	return nil
}
func (l *imageLog) Session(r SessionRecord) error {
	*l = append(*l, fmt.Sprintf("session %s expiry %d subs %v", r.ClientID, r.Expiry, r.Subscriptions))
	return nil
}
func (l *imageLog) Queued(cid string, seq uint64, r QueuedRecord) error {
	*l = append(*l, fmt.Sprintf("queued %s %d msg %d pid %d state %d subs %v", cid, seq, r.MessageID, r.PacketID, r.State, r.SubIDs))
	return nil
}
func (l *imageLog) Inbound(cid string, pid uint16) error {
	*l = append(*l, fmt.Sprintf("inbound %s %d", cid, pid))
	return nil
}
func (l *imageLog) Will(cid string, r WillRecord) error {
	*l = append(*l, fmt.Sprintf("will %s %s delay %d due %d", cid, r.Topic, r.Delay, r.Deadline))
	return nil
}
func (l *imageLog) Retained(topic string, id uint64) error {
	return errors.New("no retained in an image")
}

// TestImageRoundTrip: an image gives back its records in order, with the client id of
// its session record on the records after it; a damaged image is refused as corrupt.
func TestImageRoundTrip(t *testing.T) {
	var im Image
	im.Message(1, &MessageRecord{Topic: []byte("t/1"), Payload: []byte("m1"), QoS: 1})
	im.Message(2, &MessageRecord{Topic: []byte("t/2"), Payload: []byte(strings.Repeat("a", 300)), QoS: 2})
	im.Session(&SessionRecord{ClientID: "x", Expiry: 300, Version: 5, Subscriptions: []SubRecord{{Filter: "t/#", QoS: 1, ID: 9}}})
	im.Queued(1, &QueuedRecord{MessageID: 1, PacketID: 4, QoS: 1, State: StateSent, SubIDs: []uint32{9}})
	im.Queued(2, &QueuedRecord{MessageID: 2, QoS: 2, State: StateQueued})
	im.Inbound(7)
	im.Will(&WillRecord{Topic: []byte("w"), Payload: []byte("gone"), Delay: 60, Deadline: 1234})
	var got imageLog
	if err := LoadImage(im.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]string{
		`message 1 t/1 "m1" q1`,
		`message 2 t/2 "` + strings.Repeat("a", 300) + `" q2`,
		`session x expiry 300 subs [{t/# 9 1 false false 0}]`,
		`queued x 1 msg 1 pid 4 state 1 subs [9]`,
		`queued x 2 msg 2 pid 0 state 0 subs []`,
		`inbound x 7`,
		`will x w delay 60 due 1234`,
	})
	if fmt.Sprint([]string(got)) != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	data := im.Bytes()
	for cut := 0; cut < len(data); cut++ {
		var l imageLog
		if err := LoadImage(data[:cut], &l); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("image cut at %d of %d: %v; want ErrCorrupt", cut, len(data), err)
		}
	}
	var noSession Image
	noSession.Inbound(1)
	if err := LoadImage(noSession.Bytes(), &got); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an image without a session: %v", err)
	}
}
