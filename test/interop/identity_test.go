package interop

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// Who owns a session, with two real users: alice and bob in a password file (written by
// `bifrost passwd`) and an ACL file that gives each their own tree, the broker as a
// process, Paho clients in 3.1.1 and 5.0. alice's persistent session alice-dev is
// subscribed to alice/# with messages queued; bob, whose ACL denies alice/#, connects
// with the client id alice-dev.

// BrokerBinary returns the bifrost binary the process tests run; the external test
// package, which builds it once for the whole test binary, sets it.
var BrokerBinary func(testing.TB) string

// An idBroker is a bifrost process with the two users' files, restartable on its store.
type idBroker struct {
	dir, config, acl string
	proc             *testenv.Proc
	tcp, http        string
}

const idACL = `user alice
topic readwrite alice/#

user bob
topic readwrite bob/#
`

// startIDBroker writes the users' files and the config (auth block extra added) and
// starts the broker.
func startIDBroker(t *testing.T, extra string) *idBroker {
	t.Helper()
	bin := BrokerBinary(t)
	b := &idBroker{dir: t.TempDir()}
	passwd := filepath.Join(b.dir, "passwd")
	for i, u := range []string{"alice", "bob"} {
		args := []string{"passwd", "-b", passwd, u, u + "-pw"}
		if i == 0 {
			args = []string{"passwd", "-b", "-c", passwd, u, u + "-pw"}
		}
		if code, _, stderr := testenv.Run(t, bin, args...); code != 0 {
			t.Fatalf("bifrost %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
	}
	b.acl = filepath.Join(b.dir, "acl")
	b.writeACL(t, idACL)
	b.config = filepath.Join(b.dir, "bifrost.yaml")
	b.writeConfig(t, extra)
	b.start(t)
	return b
}

// writeConfig writes the config file, with extra in the auth block.
func (b *idBroker) writeConfig(t *testing.T, extra string) {
	t.Helper()
	cfg := fmt.Sprintf(`listeners:
  - {name: tcp, type: tcp, address: "127.0.0.1:0"}
http:
  address: "127.0.0.1:0"
store:
  dir: %q
sys_interval: 0s
log:
  level: debug
auth:
  password_file: %q
  acl_file: %q
%s`, filepath.Join(b.dir, "data"), filepath.Join(b.dir, "passwd"), b.acl, extra)
	if err := os.WriteFile(b.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (b *idBroker) writeACL(t *testing.T, rules string) {
	t.Helper()
	if err := os.WriteFile(b.acl, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
}

// start runs the broker on its files; it listens on new ports each time.
func (b *idBroker) start(t *testing.T) {
	t.Helper()
	b.tcp, b.http = "", ""
	cmd := exec.Command(BrokerBinary(t), "-c", b.config)
	b.proc = testenv.StartProc(t, cmd, 2*testenv.Timeout, func(line string) bool {
		if a, ok := testenv.MQTTAddr(line); ok {
			b.tcp = a
		}
		if a, ok := testenv.HTTPAddr(line); ok {
			b.http = a
		}
		return b.tcp != "" && b.http != ""
	})
}

// restart stops the broker gracefully and starts it again on the same store.
func (b *idBroker) restart(t *testing.T) {
	t.Helper()
	if !b.proc.Stop(syscall.SIGTERM, testenv.Timeout) {
		t.Fatal("the broker did not stop on SIGTERM")
	}
	b.start(t)
}

// reload sends SIGHUP and waits until the broker has the files in force.
func (b *idBroker) reload(t *testing.T) {
	t.Helper()
	const done = "auth and TLS files reloaded"
	n := strings.Count(b.proc.Log(), done)
	if err := b.proc.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the reload", func() bool { return strings.Count(b.proc.Log(), done) > n })
}

// metric returns the value of the series of /metrics whose line starts with series.
func (b *idBroker) metric(t *testing.T, series string) int {
	t.Helper()
	resp, err := http.Get("http://" + b.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// env is an env of mode m on the broker's TCP listener.
func (b *idBroker) env(m mode) *env { return &env{mode: m, tcp: b.tcp} }

// as returns o with user's credentials.
func as(o opts, user string) opts {
	o.user, o.password = user, user+"-pw"
	return o
}

// idModes are the versions the identity tests run in, over TCP.
var idModes = []mode{{conf.ListenerTCP, packet.V311}, {conf.ListenerTCP, packet.V5}}

// refusedID reports whether a refused CONNECT's code is "client identifier not valid":
// 5.0 0x85, 3.1.1 return code 2.
func refusedID(t *testing.T, e *env, o opts) {
	t.Helper()
	if e.v5() {
		_, ack, err := e.dial5(t, o)
		if err == nil || ack == nil || ack.ReasonCode != byte(packet.ClientIdentifierNotValid) {
			t.Fatalf("%s's CONNECT with %s: %v (CONNACK %+v), want refused with 0x85", o.user, o.id, err, ack)
		}
		return
	}
	_, code, err := e.dial3(t, o)
	if err == nil || code != 2 {
		t.Fatalf("%s's CONNECT with %s: %v (return code %d), want refused with 2", o.user, o.id, err, code)
	}
}

// foreignSetting is the auth block's line for setting; none for discard, the default.
func foreignSetting(setting string) string {
	if setting == "discard" {
		return ""
	}
	return "  foreign_session: " + setting + "\n"
}

// queueForAlice makes alice's persistent session alice-dev, subscribed to alice/# at QoS
// 1, offline with n messages queued.
func queueForAlice(t *testing.T, e *env, n int) {
	t.Helper()
	alice := e.connect(t, as(persistent("alice-dev"), "alice"))
	alice.sub(t, 1, "alice/#")
	alice.disconnect(t)
	pub := e.connect(t, as(clean("alice-pub"), "alice"))
	for i := range n {
		pub.pub(t, "alice/x", 1, false, fmt.Sprint("m", i))
	}
	pub.disconnect(t)
}

// nothingQueued checks that c received nothing since its CONNACK: a marker published to
// a topic c subscribes to now comes first, after everything a resumed session sends.
func nothingQueued(t *testing.T, e *env, c client, user string) {
	t.Helper()
	c.sub(t, 1, user+"/marker")
	pub := e.connect(t, as(clean(user+"-marker"), user))
	pub.pub(t, user+"/marker", 1, false, "marker")
	if m := c.inbox().next(t); m.Topic != user+"/marker" {
		t.Fatalf("%s received %q on %s, want nothing before the marker", user, m.Payload, m.Topic)
	}
}

// TestIdentityForeignSession is the scenario, under either setting: bob never
// gets alice's queue. discard: bob starts clean (Session Present 0) and alice's session
// is gone; refuse: bob is refused (0x85, 3.1.1: 2) and alice resumes with her messages.
func TestIdentityForeignSession(t *testing.T) {
	for _, setting := range []string{"discard", "refuse"} {
		for _, m := range idModes {
			t.Run(setting+"/"+m.String(), func(t *testing.T) {
				t.Parallel()
				b := startIDBroker(t, foreignSetting(setting))
				{
					e := b.env(m)
					queueForAlice(t, e, 3)
					if setting == "refuse" {
						refusedID(t, e, as(persistent("alice-dev"), "bob"))
						alice := e.connect(t, as(persistent("alice-dev"), "alice"))
						if !alice.present() {
							t.Fatal("alice's session is gone after bob's refused CONNECT")
						}
						for i, got := range alice.inbox().take(t, 3) {
							if got.Payload != fmt.Sprint("m", i) {
								t.Fatalf("alice's message %d is %q", i, got.Payload)
							}
						}
						alice.disconnect(t)
						return
					}
					bob := e.connect(t, as(persistent("alice-dev"), "bob"))
					if bob.present() {
						t.Fatal("bob's CONNECT with alice-dev: session present 1")
					}
					nothingQueued(t, e, bob, "bob")
					bob.disconnect(t)
					// The session is bob's now; alice's is gone, and she does not get
					// bob's either.
					alice := e.connect(t, as(persistent("alice-dev"), "alice"))
					if alice.present() {
						t.Fatal("alice resumed the session bob made")
					}
					alice.disconnect(t)
				}
			})
		}
	}
}

// TestIdentityClientIDBinding: with client_ids [%u, %u-*], bob's CONNECT with alice's
// client id is refused before it takes anything over: alice, connected, stays connected
// and goes on receiving; bob connects with an id of his own.
func TestIdentityClientIDBinding(t *testing.T) {
	for _, m := range idModes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			b := startIDBroker(t, "  client_ids: [\"%u\", \"%u-*\"]\n")
			e := b.env(m)
			alice := e.connect(t, as(persistent("alice-dev"), "alice"))
			alice.sub(t, 1, "alice/#")
			refusedID(t, e, as(persistent("alice-dev"), "bob"))
			refusedID(t, e, as(clean("carol"), "bob"))
			bob := e.connect(t, as(clean("bob-1"), "bob"))
			bob.pub(t, "bob/x", 1, false, "hi")
			pub := e.connect(t, as(clean("alice"), "alice"))
			pub.pub(t, "alice/after", 1, false, "still here")
			if got := alice.inbox().next(t); got.Payload != "still here" {
				t.Fatalf("alice received %q", got.Payload)
			}
			select {
			case <-alice.lost():
				t.Fatal("alice lost her connection")
			default:
			}
			alice.disconnect(t)
		})
	}
}

// TestIdentityACLNarrowed: messages queued for alice when a reload narrows her ACL are
// checked as they leave: those she may no longer read are dropped, counted as
// acl_denied, and their records deleted: with the old ACL back after a restart, they do
// not come back.
func TestIdentityACLNarrowed(t *testing.T) {
	for _, m := range idModes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			b := startIDBroker(t, "")
			e := b.env(m)
			alice := e.connect(t, as(persistent("alice-dev"), "alice"))
			alice.sub(t, 1, "alice/#")
			alice.disconnect(t)
			pub := e.connect(t, as(clean("alice-pub"), "alice"))
			pub.pub(t, "alice/secret/1", 1, false, "s1")
			pub.pub(t, "alice/public/1", 1, false, "p1")
			pub.pub(t, "alice/secret/2", 1, false, "s2")
			pub.disconnect(t)
			denied := b.metric(t, `bifrost_messages_dropped_total{reason="acl_denied"}`)

			b.writeACL(t, "user alice\ntopic readwrite alice/public/#\ntopic readwrite alice/marker\n")
			b.reload(t)
			alice = e.connect(t, as(persistent("alice-dev"), "alice"))
			if !alice.present() {
				t.Fatal("alice's session is gone")
			}
			if got := alice.inbox().next(t); got.Payload != "p1" {
				t.Fatalf("alice received %q on %s, want p1 alone", got.Payload, got.Topic)
			}
			nothingQueued(t, e, alice, "alice")
			alice.disconnect(t)
			if n := b.metric(t, `bifrost_messages_dropped_total{reason="acl_denied"}`); n != denied+2 {
				t.Fatalf("acl_denied drops: %d, want %d", n, denied+2)
			}

			b.writeACL(t, idACL)
			b.restart(t)
			e = b.env(m)
			alice = e.connect(t, as(persistent("alice-dev"), "alice"))
			if !alice.present() {
				t.Fatal("alice's session is gone after the restart")
			}
			nothingQueued(t, e, alice, "alice")
			alice.unsub(t, "alice/#", "alice/marker")
			alice.disconnect(t)
		})
	}
}

// TestIdentityRestart: the owner survives a restart on the store: after it, bob still
// does not get alice's queue, and alice does.
func TestIdentityRestart(t *testing.T) {
	for _, setting := range []string{"discard", "refuse"} {
		for _, m := range idModes {
			t.Run(setting+"/"+m.String(), func(t *testing.T) {
				t.Parallel()
				b := startIDBroker(t, foreignSetting(setting))
				{
					e := b.env(m)
					queueForAlice(t, e, 3)
					b.restart(t)
					e = b.env(m)
					if setting == "refuse" {
						refusedID(t, e, as(persistent("alice-dev"), "bob"))
					} else {
						bob := e.connect(t, as(persistent("alice-dev"), "bob"))
						if bob.present() {
							t.Fatal("bob resumed alice's session after the restart")
						}
						nothingQueued(t, e, bob, "bob")
						bob.disconnect(t)
						queueForAlice(t, e, 3) // alice's session is gone: again
						b.restart(t)
						e = b.env(m)
					}
					alice := e.connect(t, as(persistent("alice-dev"), "alice"))
					if !alice.present() {
						t.Fatal("alice's session is not present after the restart")
					}
					for i, got := range alice.inbox().take(t, 3) {
						if got.Payload != fmt.Sprint("m", i) {
							t.Fatalf("alice's message %d is %q", i, got.Payload)
						}
					}
					alice.disconnect(t)
				}
			})
		}
	}
}
