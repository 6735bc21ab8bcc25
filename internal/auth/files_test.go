package auth

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// filesSet is a Set whose top-level block names a password file (alice) and an ACL file
// (alice reads a/#), and whose ws listener has a block with an ACL file only.
func filesSet(t *testing.T) (*Set, *conf.Config) {
	t.Helper()
	c := conf.Default()
	c.Auth = conf.Auth{PasswordFile: passwdFile(t), ACLFile: writeTemp(t, "acl", "user alice\ntopic read a/#\n")}
	c.Listeners[1].Name = "ws"
	c.Listeners[1].Auth = &conf.Auth{AllowAnonymous: ptr(true), ACLFile: writeTemp(t, "acl-ws", "topic read ws/#\n")}
	s, err := NewSet(c, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// TestSetReadUse: Read returns what the files hold, keyed by block and kind; Use puts
// contents given as bytes in force, as a reload of those files would, and Sums follow.
func TestSetReadUse(t *testing.T) {
	s, c := filesSet(t)
	files, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, f := range files {
		keys = append(keys, f.Block+"/"+f.Kind.String())
	}
	if want := []string{"/password file", "/ACL file", "ws/ACL file"}; !slices.Equal(keys, want) {
		t.Fatalf("Read returned %q; want %q", keys, want)
	}
	before := Digest(s.Sums())
	var sums []FileSum
	for _, f := range files {
		sums = append(sums, f.Sum())
	}
	if Digest(sums) != before {
		t.Fatalf("the digest of what Read returned %s differs from the digest in force %s", Digest(sums), before)
	}

	// bob joins with his own password; alice's ACL now grants b/# instead of a/#.
	bob, err := HashPassword([]byte("bob-pw"), 4)
	if err != nil {
		t.Fatal(err)
	}
	pw := append(slices.Clone(files[0].Data), []byte("bob:"+bob+"\n")...)
	changed, skipped, err := s.Use([]File{
		{Block: "", Kind: KindPassword, Data: pw},
		{Block: "", Kind: KindACL, Data: []byte("user alice\ntopic read b/#\n")},
		{Block: "other", Kind: KindACL, Data: []byte("topic read #\n")},
		{Block: "ws", Kind: KindPassword, Data: pw},
	}, "cluster")
	if err != nil || !changed {
		t.Fatalf("Use: changed %v, %v", changed, err)
	}
	if len(skipped) != 2 || skipped[0].Block != "other" || skipped[1].Block != "ws" {
		t.Errorf("skipped %+v; want the unknown block's and the kind ws does not name", skipped)
	}
	if _, err := s.Authenticate(req("bob", "bob-pw")); err != nil {
		t.Errorf("bob after Use: %v", err)
	}
	top := s.For(c.Listeners[0].Name)
	if top.Allow("alice", "c", Read, "a/x") || !top.Allow("alice", "c", Read, "b/x") {
		t.Error("the ACL given to Use is not in force")
	}
	if s.For("ws").state.Load().users != nil {
		t.Error("a password file reached a block that names none")
	}
	after := Digest(s.Sums())
	if after == before {
		t.Error("the digest in force did not change")
	}
	// The same contents again change nothing.
	if changed, _, err := s.Use([]File{{Block: "", Kind: KindPassword, Data: pw}}, "cluster"); changed || err != nil {
		t.Errorf("Use of the contents in force: changed %v, %v", changed, err)
	}

	// A file that does not parse changes nothing of its block, and says which file.
	_, _, err = s.Use([]File{
		{Block: "", Kind: KindACL, Data: []byte("user alice\ntopic read a/#\n")},
		{Block: "", Kind: KindPassword, Data: []byte("carol\n")},
	}, "cluster")
	if err == nil || !strings.Contains(err.Error(), c.Auth.PasswordFile+" (cluster):1") {
		t.Errorf("Use of a broken password file: %v", err)
	}
	if top.Allow("alice", "c", Read, "a/x") || Digest(s.Sums()) != after {
		t.Error("a broken file in the same block changed the ACL in force")
	}

	// Read checks the files: a broken one is reported and nothing is returned.
	if err := os.WriteFile(c.Listeners[1].Auth.ACLFile, []byte("topic nonsense word a/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if files, err := s.Read(); err == nil || files != nil || !strings.Contains(err.Error(), "listener ws") {
		t.Errorf("Read of a broken ACL file: %d files, %v", len(files), err)
	}
	if Digest(s.Sums()) != after {
		t.Error("Read changed what is in force")
	}
}

func TestDigest(t *testing.T) {
	a := File{Block: "", Kind: KindPassword, Data: []byte("x")}.Sum()
	b := File{Block: "l", Kind: KindACL, Data: []byte("y")}.Sum()
	if Digest(nil) != "" {
		t.Error("the digest of nothing is not empty")
	}
	if Digest([]FileSum{a, b}) != Digest([]FileSum{b, a}) {
		t.Error("the digest depends on the order")
	}
	moved := b
	moved.Block = ""
	if Digest([]FileSum{a, b}) == Digest([]FileSum{a, moved}) {
		t.Error("the digest does not tell the blocks apart")
	}
}

// TestLoadReportsEveryFile: a password file that does not read and an ACL file that does
// not parse are both reported by one load.
func TestLoadReportsEveryFile(t *testing.T) {
	dir := t.TempDir()
	c := conf.Auth{PasswordFile: dir + "/missing", ACLFile: writeTemp(t, "acl", "topic nonsense word a/#\n")}
	_, err := New(c, quiet)
	if err == nil || !strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), c.ACLFile+":1") {
		t.Fatalf("New = %v; want both files' problems", err)
	}
}
