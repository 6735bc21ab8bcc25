package auth

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/xdg-go/scram"
)

// newSCRAMAuth returns an Auth whose password file holds a SCRAM record for "alice"
// (password "wonderland", 4096 iterations), one for "bob, the =builder" (a name that
// needs escaping) and a bcrypt hash for "carol".
func newSCRAMAuth(t testing.TB) *Auth {
	t.Helper()
	alice, err := SCRAMRecord([]byte("wonderland"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	bob, _ := SCRAMRecord([]byte("can we fix it"), 4096)
	carol, _ := HashPassword([]byte("bcrypted"), 4)
	file := writeTemp(t, "passwd", "alice:"+alice+"\nbob, the =builder:"+bob+"\ncarol:"+carol+"\n")
	a, err := New(conf.Auth{PasswordFile: file}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// converse runs a SCRAM conversation between an xdg-go/scram client and m, as a broker
// would carry it in CONNECT, AUTH and CONNACK. It returns the server's result and error
// and whether the client accepted the server's signature.
func converse(t *testing.T, m Method, req *Request, cc *scram.ClientConversation) (Result, error, bool) {
	t.Helper()
	ex := m.Start(req)
	msg, err := cc.Step("")
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		out, done, res, err := ex.Step([]byte(msg))
		if err != nil {
			return res, err, false
		}
		next, cerr := cc.Step(string(out))
		if done {
			return res, nil, cerr == nil && cc.Valid()
		}
		if cerr != nil {
			t.Fatalf("client: %v", cerr)
		}
		msg = next
	}
	t.Fatal("the exchange does not end")
	return Result{}, nil, false
}

func scramClient(t *testing.T, user, pw string) *scram.Client {
	t.Helper()
	c, err := scram.SHA256.NewClient(user, pw, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSCRAMWithXDGClient authenticates github.com/xdg-go/scram's client, an independent
// implementation, against the method.
func TestSCRAMWithXDGClient(t *testing.T) {
	a := newSCRAMAuth(t)
	ms := a.Methods()
	if len(ms) != 1 || ms[0].Name() != "SCRAM-SHA-256" {
		t.Fatalf("Methods() = %v", ms)
	}
	m := ms[0]
	for _, tc := range []struct {
		name, user, pw string
		connUser       string // the CONNECT's username, "" for none
		want           error
	}{
		{"right password", "alice", "wonderland", "", nil},
		{"CONNECT names the same user", "alice", "wonderland", "alice", nil},
		{"escaped name", "bob, the =builder", "can we fix it", "", nil},
		{"wrong password", "alice", "wonderlant", "", ErrBadCredentials},
		{"unknown user", "mallory", "wonderland", "", ErrBadCredentials},
		{"user without a SCRAM record", "carol", "bcrypted", "", ErrBadCredentials},
		{"CONNECT names another user", "alice", "wonderland", "bob", ErrBadCredentials},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &Request{ClientID: "c1", Listener: "mqtt"}
			if tc.connUser != "" {
				req.Username, req.HasUsername = tc.connUser, true
			}
			res, err, clientOK := converse(t, m, req, scramClient(t, tc.user, tc.pw).NewConversation())
			if !errors.Is(err, tc.want) && err != tc.want {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.want != nil {
				return
			}
			if res.Username != tc.user {
				t.Errorf("Result.Username = %q, want %q", res.Username, tc.user)
			}
			if !clientOK {
				t.Error("the client refused the server's signature")
			}
		})
	}

	t.Run("gs2 flag y", func(t *testing.T) {
		cc := scramClient(t, "alice", "wonderland").NewConversationAdvertisingChannelBinding()
		if _, err, ok := converse(t, m, &Request{}, cc); err != nil || !ok {
			t.Fatalf("err = %v, client ok %v", err, ok)
		}
	})
	t.Run("channel binding p= is refused", func(t *testing.T) {
		cb := scram.ChannelBinding{Type: scram.ChannelBindingTLSExporter, Data: []byte("0123456789abcdef0123456789abcdef")}
		cc := scramClient(t, "alice", "wonderland").NewConversationWithChannelBinding(cb)
		if _, err, _ := converse(t, m, &Request{}, cc); !errors.Is(err, ErrNotAuthorized) {
			t.Fatalf("err = %v, want ErrNotAuthorized", err)
		}
	})
}

// TestSCRAMRecordMatchesXDG checks SCRAMRecord's keys are those the independent client
// derives from the same salt and iteration count.
func TestSCRAMRecordMatchesXDG(t *testing.T) {
	rec, err := SCRAMRecord([]byte("pencil"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	c := mustRecord(t, rec)
	sc, err := scramClient(t, "user", "pencil").GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(c.salt), Iters: c.cost})
	if err != nil {
		t.Fatal(err)
	}
	if string(sc.StoredKey) != string(c.hash) || string(sc.ServerKey) != string(c.srv) {
		t.Fatal("StoredKey or ServerKey differ from xdg-go/scram's")
	}
}

// TestSCRAMRFC7677 replays the example exchange of RFC 7677 section 3 (user "user",
// password "pencil") with the server nonce fixed.
func TestSCRAMRFC7677(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	stored, server := scramKeys([]byte("pencil"), salt, 4096)
	b := base64.StdEncoding
	rec := "$scram-sha-256$4096$" + b.EncodeToString(salt) + "$" + b.EncodeToString(stored) + "$" + b.EncodeToString(server)
	a, err := New(conf.Auth{PasswordFile: writeTemp(t, "passwd", "user:"+rec+"\n")}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer func(f func() string) { scramNonce = f }(scramNonce)
	scramNonce = func() string { return "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0" }

	ex := a.Methods()[0].Start(&Request{})
	out, done, _, err := ex.Step([]byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
	if want := "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"; err != nil || done || string(out) != want {
		t.Fatalf("server-first = %q, %v, %v; want %q", out, done, err, want)
	}
	out, done, res, err := ex.Step([]byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	if want := "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="; err != nil || !done || string(out) != want || res.Username != "user" {
		t.Fatalf("server-final = %q, %v, %+v, %v; want %q", out, done, res, err, want)
	}
	if _, _, _, err := ex.Step(nil); err == nil {
		t.Error("a third step is accepted")
	}
}

// TestSCRAMMalformed sends broken messages at each step.
func TestSCRAMMalformed(t *testing.T) {
	a := newSCRAMAuth(t)
	m := a.Methods()[0]
	for _, first := range []string{
		"", "n", "n,,", "x,,n=alice,r=abc", "p=tls-unique,,n=alice,r=abc", "n,,r=abc,n=alice",
		"n,,m=ext,n=alice,r=abc", "n,,n=al=ice,r=abc", "n,,n=alice,r=", "n,,n=alice,r=a,b",
		"n,a=bob,n=alice,r=abc", "n,,n=,r=abc",
	} {
		if _, _, _, err := m.Start(&Request{}).Step([]byte(first)); err == nil {
			t.Errorf("client-first %q accepted", first)
		}
	}
	if _, _, _, err := m.Start(&Request{}).Step([]byte("n,a=alice,n=alice,r=abc")); err != nil {
		t.Errorf("an authzid naming the user itself is refused: %v", err)
	}

	start := func() (Exchange, string) {
		ex := m.Start(&Request{})
		out, _, _, err := ex.Step([]byte("n,,n=alice,r=clientnonce"))
		if err != nil {
			t.Fatal(err)
		}
		nonce := strings.TrimPrefix(strings.Split(string(out), ",")[0], "r=")
		return ex, nonce
	}
	ex, nonce := start()
	proof := base64.StdEncoding.EncodeToString(make([]byte, 32))
	for _, final := range []string{
		"",
		"c=biws,r=" + nonce,                        // no proof
		"c=eSws,r=" + nonce + ",p=" + proof,        // c= repeats another gs2 header
		"c=biws,r=clientnonce,p=" + proof,          // the server's part of the nonce is missing
		"c=biws,r=" + nonce + "x,p=" + proof,       // another nonce
		"c=biws,r=" + nonce + ",p=AAAA",            // short proof
		"r=" + nonce + ",c=biws,p=" + proof,        // out of order
		"c=biws,r=" + nonce + ",p=" + proof + "!!", // not base64
	} {
		ex, nonce = start()
		_ = nonce
		if _, _, _, err := ex.Step([]byte(final)); err == nil {
			t.Errorf("client-final %q accepted", final)
		}
	}
	_ = ex
	ex, nonce = start()
	if _, _, _, err := ex.Step([]byte("c=biws,r=" + nonce + ",p=" + proof)); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("a wrong proof: err = %v, want ErrBadCredentials", err)
	}
}

// TestSCRAMUnknownUserLooksNormal checks an unknown user gets a server-first-message of
// the usual shape, with the same salt on every attempt, so that the exchange does not
// tell which users exist.
func TestSCRAMUnknownUserLooksNormal(t *testing.T) {
	a := newSCRAMAuth(t)
	m := a.Methods()[0]
	first := func(user string) []string {
		out, _, _, err := m.Start(&Request{}).Step([]byte("n,,n=" + user + ",r=abc"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(out), ",")
	}
	known, unknown, again := first("alice"), first("mallory"), first("mallory")
	if len(unknown) != 3 || unknown[2] != known[2] || len(unknown[1]) != len(known[1]) {
		t.Errorf("unknown user's server-first %q differs in shape from %q", unknown, known)
	}
	if unknown[1] != again[1] {
		t.Error("an unknown user's salt changes between attempts")
	}
	if first("carol")[1] == unknown[1] {
		t.Error("two users without a SCRAM record share a salt")
	}
	// The stand-in salt is stable across a reload too.
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if first("mallory")[1] != unknown[1] {
		t.Error("an unknown user's salt changes across a reload")
	}
}

// TestSCRAMNoPasswordFile checks no method is offered without a password file.
func TestSCRAMNoPasswordFile(t *testing.T) {
	a, err := New(conf.Auth{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if ms := a.Methods(); len(ms) != 0 {
		t.Fatalf("Methods() = %v", ms)
	}
	if _, _, _, err := (scramMethod{a}).Start(&Request{}).Step([]byte("n,,n=a,r=b")); !errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("err = %v", err)
	}
}
