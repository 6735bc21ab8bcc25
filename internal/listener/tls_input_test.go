package listener

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestTLSStreamsKeptApart: many tls and wss clients on one poller send at once, each its
// own stream of bytes in writes of varied sizes (so that records straddle the poller's
// reads and partial records wait between them), and every connection receives its own
// stream, whole and in order, and nothing else. The poller lends all of them the same
// input buffer, one after another (tls_input.go): if crypto/tls kept a slice of it past a
// read, a connection would get another's bytes, or fail to decrypt a record.
func TestTLSStreamsKeptApart(t *testing.T) {
	perType, size := 48, 160<<10 // 96 clients, 15 MiB
	if testenv.Race {
		perType, size = 48, 64<<10
	}
	for _, read := range []int{3001, DefaultReadBufferSize} {
		t.Run(fmt.Sprintf("read=%d", read), func(t *testing.T) {
			h := &streamChecker{want: size}
			s := newTestServer(t, h, Options{Pollers: 1, ReadBufferSize: read})
			var clients []*client
			for _, typ := range []string{conf.ListenerTLS, conf.ListenerWSS} {
				l := listen(t, s, typ)
				for range perType {
					clients = append(clients, dialSplit(t, l, uint64(len(clients))))
				}
			}
			var wg sync.WaitGroup
			for i, c := range clients {
				wg.Go(func() {
					if err := sendStream(c, uint32(i), size); err != nil {
						t.Errorf("client %d: %v", i, err)
					}
				})
			}
			testenv.WaitFor(t, "every stream received, or one failed", func() bool {
				return h.done.Load() == int32(len(clients)) || h.failed.Load() != 0
			})
			wg.Wait()
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, st := range h.streams {
				st.mu.Lock()
				if st.err != nil {
					t.Errorf("stream %d: %v", st.id, st.err)
				}
				st.mu.Unlock()
			}
			if n := h.done.Load(); n != int32(len(clients)) {
				t.Fatalf("%d of %d streams received whole", n, len(clients))
			}
		})
	}
}

// splitConn writes each buffer (a TLS record, or a flight) as up to three writes cut at
// random points, so that a poller's read often ends inside a record, the rest of which
// comes after the poller has served other connections.
type splitConn struct {
	net.Conn
	cut *rand.Rand
}

func (c *splitConn) Write(p []byte) (int, error) {
	a := c.cut.IntN(len(p) + 1)
	b := a + c.cut.IntN(len(p)-a+1)
	for _, piece := range [][]byte{p[:a], p[a:b], p[b:]} {
		if len(piece) == 0 {
			continue
		}
		if _, err := c.Conn.Write(piece); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// dialSplit connects a tls or wss client whose records go out in pieces (splitConn).
func dialSplit(t testing.TB, l *Listener, seed uint64) *client {
	t.Helper()
	raw := dialTCP(t, l)
	tc := tls.Client(&splitConn{Conn: raw, cut: rand.New(rand.NewPCG(seed, 1))}, clientTLS())
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	c := &client{Conn: tc, raw: raw.(*net.TCPConn)}
	if l.kind&kindWeb != 0 {
		ws, res, err := wsHandshake(tc, "/mqtt", "mqtt")
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %s", res.Status)
		}
		c.ws = ws
	}
	return c
}

// streamBytes fills p with the bytes of stream id from offset off on: a ChaCha8 stream
// keyed by id, so that no two streams share a run of bytes.
type streamBytes struct{ r *rand.ChaCha8 }

func newStreamBytes(id uint32) streamBytes {
	var seed [32]byte
	binary.LittleEndian.PutUint32(seed[:], id+1)
	return streamBytes{rand.NewChaCha8(seed)}
}

func (s streamBytes) fill(p []byte) { _, _ = s.r.Read(p) }

// sendStream sends stream id on c: its id (4 bytes), then size bytes of it, in writes of
// 1 byte to 40 KiB (on wss, one message each).
func sendStream(c *client, id uint32, size int) error {
	src := newStreamBytes(id)
	pick := rand.New(rand.NewPCG(uint64(id), 7))
	sizes := []int{1, 3, 17, 200, 1000, 4000, 9000, 16384, 16389, 25000, 40000}
	buf := make([]byte, 40000)
	first := binary.BigEndian.AppendUint32(nil, id)
	for sent := 0; sent < size; {
		n := min(sizes[pick.IntN(len(sizes))], size-sent)
		p := buf[:n]
		src.fill(p)
		if first != nil {
			p = append(first, p...)
			first = nil
		}
		var err error
		if c.ws != nil {
			_, err = c.ws.Write(frame(true, wsBinary, p))
		} else {
			_, err = c.Write(p)
		}
		if err != nil {
			return fmt.Errorf("after %d bytes: %w", sent, err)
		}
		sent += n
	}
	return nil
}

// streamChecker is a Handler that checks each connection's bytes against the stream its
// first 4 bytes name, as they come.
type streamChecker struct {
	want   int          // bytes per stream, after the id
	done   atomic.Int32 // streams received whole
	failed atomic.Int32 // streams that went wrong

	mu      sync.Mutex
	streams []*streamState
}

// streamState is one connection's progress. OnData calls for a connection never overlap;
// its lock only orders it for OnClose's report.
type streamState struct {
	mu   sync.Mutex
	id   uint32
	head []byte // the id's bytes, until 4 came
	src  streamBytes
	got  int // bytes of the stream received and matching
	err  error
	exp  []byte
}

func (h *streamChecker) OnOpen(c Conn) {
	st := &streamState{}
	c.SetValue(st)
	h.mu.Lock()
	h.streams = append(h.streams, st)
	h.mu.Unlock()
}

func (h *streamChecker) OnData(c Conn, data []byte) {
	st := c.Value().(*streamState)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return
	}
	if len(st.head) < 4 {
		k := min(4-len(st.head), len(data))
		st.head, data = append(st.head, data[:k]...), data[k:]
		if len(st.head) < 4 {
			return
		}
		st.id = binary.BigEndian.Uint32(st.head)
		st.src = newStreamBytes(st.id)
	}
	if st.got+len(data) > h.want {
		h.fail(st, fmt.Errorf("%d bytes past the end of the stream", st.got+len(data)-h.want))
		return
	}
	if cap(st.exp) < len(data) {
		st.exp = make([]byte, len(data))
	}
	exp := st.exp[:len(data)]
	st.src.fill(exp)
	if !bytes.Equal(data, exp) {
		i := 0
		for data[i] == exp[i] {
			i++
		}
		h.fail(st, fmt.Errorf("byte %d of the stream differs (a read of %d bytes)", st.got+i, len(data)))
		return
	}
	st.got += len(data)
	if st.got == h.want {
		h.done.Add(1)
	}
}

func (h *streamChecker) OnClose(c Conn, err error) {
	st := c.Value().(*streamState)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err == nil && st.got < h.want {
		h.fail(st, fmt.Errorf("closed after %d of %d bytes: %v", st.got, h.want, err))
	}
}

// fail records the first error of st. st.mu is held.
func (h *streamChecker) fail(st *streamState, err error) {
	st.err = err
	h.failed.Add(1)
}
