//go:build unix

package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/mqtttest"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// authStatus is the auth part of a node's /cluster.
type authStatus struct {
	Auth struct {
		InForce    string `json:"in_force"`
		Replicated string `json:"replicated"`
		Index      uint64 `json:"index"`
	} `json:"auth"`
	Members []struct {
		Name       string `json:"name"`
		AuthDigest string `json:"auth_digest"`
	} `json:"members"`
}

// authFiles writes a node's own password and ACL files into dir and returns the auth
// block naming them.
func authFiles(t *testing.T, dir, passwd, acl string) string {
	t.Helper()
	pw, aclFile := filepath.Join(dir, "passwd"), filepath.Join(dir, "acl")
	if err := os.WriteFile(pw, []byte(passwd), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("auth:\n  password_file: %q\n  acl_file: %q\n", pw, aclFile)
}

// waitAuthAgree waits until every node of nodes enforces the auth files the log holds,
// all the same and other than not (""), and sees every other's digest equal through
// gossip; it returns the digest.
func waitAuthAgree(t *testing.T, nodes []*node, not string) string {
	t.Helper()
	var digest string
	var last []string
	testenv.WaitFor(t, "every node enforcing the same auth files", func() bool {
		digest, last = "", last[:0]
		for _, nd := range nodes {
			var s authStatus
			body, err := nd.get("/cluster")
			if err == nil {
				err = json.Unmarshal(body, &s)
			}
			if err != nil {
				last = append(last, fmt.Sprintf("%s: %v", nd.name, err))
				return false
			}
			last = append(last, fmt.Sprintf("%s: %+v", nd.name, s))
			a := s.Auth
			if a.InForce == "" || a.InForce != a.Replicated || a.InForce == not || digest != "" && a.InForce != digest {
				return false
			}
			digest = a.InForce
			for _, m := range s.Members {
				if m.AuthDigest != digest {
					return false
				}
			}
		}
		return true
	})
	if t.Failed() {
		t.Logf("last views:\n%s", strings.Join(last, "\n"))
	}
	return digest
}

// login connects a clean MQTT 5 client as user to nd and returns the CONNACK's code and,
// when accepted, the connection.
func login(t *testing.T, nd *node, id, user, pw string) (packet.ReasonCode, *mqtttest.Raw) {
	t.Helper()
	c := mqtttest.DialRaw(t, nd.mqttAddr())
	ack, err := c.Connect(&packet.Connect{CleanStart: true, ClientID: []byte(id),
		UsernameFlag: true, Username: []byte(user), PasswordFlag: true, Password: []byte(pw)})
	if err != nil {
		t.Fatalf("%s: CONNECT of %s: %v", nd.name, user, err)
	}
	return ack.Code, c
}

// mustLogin is login, failing the test unless the client is accepted.
func mustLogin(t *testing.T, nd *node, id, user, pw string) *mqtttest.Raw {
	t.Helper()
	code, c := login(t, nd, id, user, pw)
	if code != packet.Success {
		t.Fatalf("%s: CONNECT of %s answered %v; want Success", nd.name, user, code)
	}
	return c
}

var authPacketID uint16

// subCode subscribes c to filter at QoS 1 and returns the SUBACK's code.
func subCode(t *testing.T, c *mqtttest.Raw, filter string) packet.ReasonCode {
	t.Helper()
	authPacketID++
	ack := c.Expect(t, &packet.Subscribe{PacketID: authPacketID, Subscriptions: []packet.Subscription{{Filter: []byte(filter), QoS: 1}}}, packet.SUBACK).(*packet.Suback)
	return ack.Codes[0]
}

// pubCode publishes at QoS 1 to topic from c and returns the PUBACK's code.
func pubCode(t *testing.T, c *mqtttest.Raw, topic string) packet.ReasonCode {
	t.Helper()
	authPacketID++
	ack := c.Expect(t, &packet.Publish{Topic: []byte(topic), Payload: []byte("x"), QoS: 1, PacketID: authPacketID}, packet.PUBACK).(*packet.Ack)
	return ack.Code
}

// TestAuthReplicated: the password and ACL files every node enforces are the cluster's.
// Each node has its own copy of the files; only n1's changes, and a SIGHUP of n1 alone
// puts the change in force on every node: a new user connects to the others, and an ACL
// rule revoked there denies SUBSCRIBE and PUBLISH (v5 0x87), on new connections and on
// one open since before. A broken file, or one over the size bound, reloaded changes
// nothing anywhere. A node
// restarted, and one joining late, both with the stale files, enforce the cluster's.
func TestAuthReplicated(t *testing.T) {
	alicePW, err := auth.HashPassword([]byte("alice-pw"), 4)
	if err != nil {
		t.Fatal(err)
	}
	bobPW, err := auth.HashPassword([]byte("bob-pw"), 4)
	if err != nil {
		t.Fatal(err)
	}
	oldPasswd := "alice:" + alicePW + "\n"
	oldACL := "user alice\ntopic readwrite t/#\n"
	newPasswd := oldPasswd + "bob:" + bobPW + "\n"
	newACL := "user alice\ntopic readwrite u/#\nuser bob\ntopic readwrite t/#\n"

	c := newCluster(t, 3, func(i int, cfg *nodeConfig) {
		cfg.YAML = authFiles(t, t.TempDir(), oldPasswd, oldACL)
	})
	c.start()
	c.waitFormed()
	before := waitAuthAgree(t, c.nodes, "")

	for _, nd := range c.nodes {
		a := mustLogin(t, nd, "alice-"+nd.name, "alice", "alice-pw")
		if code := subCode(t, a, "t/x"); code != packet.GrantedQoS1 {
			t.Errorf("%s: alice's SUBSCRIBE t/x before the change: %v", nd.name, code)
		}
		if code := pubCode(t, a, "t/p"); code != packet.Success && code != packet.NoMatchingSubscribers {
			t.Errorf("%s: alice's PUBLISH t/p before the change: %v", nd.name, code)
		}
		if code, _ := login(t, nd, "bob-"+nd.name, "bob", "bob-pw"); code != packet.BadUserNameOrPassword {
			t.Errorf("%s: bob before the change: %v; want Bad user name or password", nd.name, code)
		}
	}
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	open := mustLogin(t, n2, "alice-open", "alice", "alice-pw") // stays open through the change

	// A broken file on n2, reloaded, changes nothing on any node.
	if err := os.WriteFile(aclPath(n2), []byte("topic nonsense word t/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n2.signal(syscall.SIGHUP)
	testenv.WaitFor(t, "n2 reporting its broken ACL file", func() bool {
		return strings.Contains(n2.logs(), "reload of auth and TLS files failed")
	})
	if got := waitAuthAgree(t, c.nodes, ""); got != before {
		t.Fatalf("a broken file reloaded on n2 changed the auth digest from %s to %s", before, got)
	}

	// A file over the size bound, valid as it is, is refused with a reason and changes
	// nothing either.
	big := oldACL + strings.Repeat("# a comment line to make the file big\n", 3<<20/38+1)
	if err := os.WriteFile(aclPath(n2), []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	n2.signal(syscall.SIGHUP)
	testenv.WaitFor(t, "n2 refusing its big ACL file", func() bool {
		return strings.Contains(n2.logs(), "the ACL file of auth is") && strings.Contains(n2.logs(), "at most 3145728 (3 MiB) are replicated")
	})
	if got := waitAuthAgree(t, c.nodes, ""); got != before {
		t.Fatalf("a file over the bound reloaded on n2 changed the auth digest from %s to %s", before, got)
	}

	// Only n1's files change; only n1 reloads.
	authFiles(t, filepath.Dir(aclPath(n1)), newPasswd, newACL)
	n1.signal(syscall.SIGHUP)
	after := waitAuthAgree(t, c.nodes, before)
	t.Logf("auth digest %s, then %s", before, after)

	for _, nd := range c.nodes {
		b := mustLogin(t, nd, "bob-"+nd.name, "bob", "bob-pw")
		if code := subCode(t, b, "t/x"); code != packet.GrantedQoS1 {
			t.Errorf("%s: bob's SUBSCRIBE t/x: %v", nd.name, code)
		}
		a := mustLogin(t, nd, "alice2-"+nd.name, "alice", "alice-pw")
		if code := subCode(t, a, "t/x"); code != packet.NotAuthorized {
			t.Errorf("%s: alice's SUBSCRIBE t/x after the revocation: %v; want Not authorized", nd.name, code)
		}
		if code := pubCode(t, a, "t/p"); code != packet.NotAuthorized {
			t.Errorf("%s: alice's PUBLISH t/p after the revocation: %v; want Not authorized", nd.name, code)
		}
		if code := subCode(t, a, "u/x"); code != packet.GrantedQoS1 {
			t.Errorf("%s: alice's SUBSCRIBE u/x, granted by the new ACL: %v", nd.name, code)
		}
	}
	if code := subCode(t, open, "t/y"); code != packet.NotAuthorized {
		t.Errorf("n2: the connection open since before: SUBSCRIBE t/y answered %v; want Not authorized", code)
	}
	if code := pubCode(t, open, "t/y"); code != packet.NotAuthorized {
		t.Errorf("n2: the connection open since before: PUBLISH t/y answered %v; want Not authorized", code)
	}

	// n3 restarts on its stale files, and n4 joins with stale files of its own: both
	// enforce the cluster's, and say that their own differ.
	n3.kill()
	n3.start()
	n4 := c.add("n4", nodeConfig{Seeds: c.gossips()[:3], BootstrapExpect: 3})
	n4.cfg.YAML = authFiles(t, t.TempDir(), oldPasswd, oldACL)
	n4.start()
	c.waitFormed()
	if got := waitAuthAgree(t, c.nodes, before); got != after {
		t.Fatalf("after the restart and the join the cluster enforces %s; want %s", got, after)
	}
	for _, nd := range []*node{n3, n4} {
		b := mustLogin(t, nd, "bob-again-"+nd.name, "bob", "bob-pw")
		if code := subCode(t, b, "t/x"); code != packet.GrantedQoS1 {
			t.Errorf("%s: bob's SUBSCRIBE t/x: %v", nd.name, code)
		}
		a := mustLogin(t, nd, "alice3-"+nd.name, "alice", "alice-pw")
		if code := subCode(t, a, "t/x"); code != packet.NotAuthorized {
			t.Errorf("%s, on stale files: alice's SUBSCRIBE t/x: %v; want Not authorized", nd.name, code)
		}
		if !strings.Contains(nd.logs(), "this node enforces the cluster's auth file, not its own") {
			t.Errorf("%s did not warn that its own auth files differ from the cluster's", nd.name)
		}
	}
}

// aclPath returns the path of nd's ACL file, from its config.
func aclPath(nd *node) string {
	for _, line := range strings.Split(nd.cfg.YAML, "\n") {
		if v, ok := strings.CutPrefix(line, "  acl_file: "); ok {
			return strings.Trim(v, `"`)
		}
	}
	nd.t.Fatalf("%s has no acl_file", nd.name)
	return ""
}
