package auth

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// mosquittoVector is a line mosquitto_passwd 2.0.11 wrote (mosquitto_passwd -c -b pw pub
// secret): an independent implementation of the $7$ format.
const mosquittoVector = "pub:$7$101$e6Cki0/G2KPkb8pM$NQJSDW3+E3GVhnH8oPKcif8zUYpi9iw1GiPjEYZ5qMyKjhAEC8QTZpy22m2Ue9BQ1obARlaK9W43OkS1LZtajQ=="

func mustRecord(t testing.TB, rec string) credential {
	t.Helper()
	c, err := parseRecord(rec)
	if err != nil {
		t.Fatalf("parseRecord: %v", err)
	}
	return c
}

func TestVerifyMosquittoVector(t *testing.T) {
	_, rec, _ := strings.Cut(mosquittoVector, ":")
	c := mustRecord(t, rec)
	if c.kind != kindMosquitto || c.cost != 101 || len(c.salt) != 12 {
		t.Fatalf("decoded %+v", c)
	}
	if !c.verify([]byte("secret")) {
		t.Error("the right password does not verify")
	}
	for _, pw := range []string{"", "Secret", "secret ", "secre"} {
		if c.verify([]byte(pw)) {
			t.Errorf("%q verifies", pw)
		}
	}
}

// TestVerifyMosquittoPasswd has the installed mosquitto_passwd write hashes, for both of
// its own hash kinds, and checks bifrost verifies $7$ and refuses $6$ with a reason.
func TestVerifyMosquittoPasswd(t *testing.T) {
	tool := testenv.Command(t, "mosquitto_passwd", "apt-get install -y mosquitto")
	file := filepath.Join(t.TempDir(), "pw")
	pws := map[string]string{"alice": "correct horse", "bob": "pässwörd", "carol": "x"}
	first := true
	for u, pw := range pws {
		args := []string{"-b", file, u, pw}
		if first {
			args = append([]string{"-c"}, args...)
			first = false
		}
		if out, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
		}
	}
	p, err := loadPasswords(file)
	if err != nil {
		t.Fatalf("loading mosquitto_passwd's file: %v", err)
	}
	for u, pw := range pws {
		c := p.byName[u]
		if c.kind != kindMosquitto {
			t.Fatalf("%s: kind %d, want $7$", u, c.kind)
		}
		if !c.verify([]byte(pw)) || c.verify([]byte(pw+"!")) {
			t.Errorf("%s: verify is wrong", u)
		}
	}

	old := filepath.Join(t.TempDir(), "pw6")
	if out, err := exec.Command(tool, "-H", "sha512", "-c", "-b", old, "dave", "pw").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd -H sha512: %v\n%s", err, out)
	}
	_, err = loadPasswords(old)
	if err == nil || !strings.Contains(err.Error(), old+":1: user \"dave\": $6$") {
		t.Errorf("a $6$ file: err = %v, want a refusal naming file, line and user", err)
	}
}

func TestBcrypt(t *testing.T) {
	rec, err := HashPassword([]byte("hunter2"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	c := mustRecord(t, rec)
	if c.kind != kindBcrypt || c.cost != bcrypt.MinCost {
		t.Fatalf("decoded %+v", c)
	}
	if !c.verify([]byte("hunter2")) || c.verify([]byte("hunter3")) {
		t.Error("verify is wrong")
	}

	// bcrypt ignores bytes past 72: a longer password must not verify against the hash
	// of its first 72 bytes.
	long := bytes.Repeat([]byte("a"), 72)
	rec, err = HashPassword(long, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if c := mustRecord(t, rec); !c.verify(long) || c.verify(append(long, 'b')) {
		t.Error("72-byte password: verify is wrong")
	}
	if _, err := HashPassword(append(long, 'b'), bcrypt.MinCost); err == nil {
		t.Error("HashPassword accepted 73 bytes")
	}
	for _, cost := range []int{-1, 3, 32} {
		if _, err := HashPassword([]byte("x"), cost); err == nil {
			t.Errorf("HashPassword accepted cost %d", cost)
		}
	}
	if _, err := HashPassword(nil, bcrypt.MinCost); err == nil {
		t.Error("HashPassword accepted an empty password")
	}
}

func TestSCRAMRecord(t *testing.T) {
	rec, err := SCRAMRecord([]byte("pencil"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rec, "$scram-sha-256$4096$") {
		t.Fatalf("record %q", rec)
	}
	c := mustRecord(t, rec)
	if !c.verify([]byte("pencil")) || c.verify([]byte("pencil2")) {
		t.Error("verify is wrong")
	}
	// A fresh salt each time.
	if rec2, _ := SCRAMRecord([]byte("pencil"), 0); rec2 == rec {
		t.Error("two records of one password are equal")
	}
	if _, err := SCRAMRecord([]byte("x"), maxIterations+1); err == nil {
		t.Error("SCRAMRecord accepted too many iterations")
	}
}

// TestParseRecordErrors checks what each bad record says, and that no message quotes the
// record (a hash is still a secret).
func TestParseRecordErrors(t *testing.T) {
	for _, tc := range []struct{ rec, want string }{
		{"", "no password hash"},
		{"secret", "unknown password hash"},
		{"$2a$10$tooshort", "malformed bcrypt hash"},
		{"$6$c2FsdA==$aGFzaA==", "$6$"},
		{"$7$101$c2FsdA==", "want $7$iterations$salt$hash"},
		{"$7$0$c2FsdA==$aGFzaA==", "iteration count"},
		{"$7$x$c2FsdA==$aGFzaA==", "iteration count"},
		{"$7$101$c2FsdA==$aGFzaA==", "right length"},
		{"$7$101$!!!$aGFzaA==", "base64"},
		{"$scram-sha-256$4096$c2FsdA==$aGFzaA==", "want $scram-sha-256$"},
		{"$scram-sha-256$4096$c2FsdA==$aGFzaA==$aGFzaA==", "right length"},
	} {
		t.Run(tc.rec, func(t *testing.T) {
			_, err := parseRecord(tc.rec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
			if len(tc.rec) > 8 && strings.Contains(err.Error(), tc.rec) {
				t.Errorf("the message quotes the record: %v", err)
			}
		})
	}
}

// TestDummyMatchesDominant checks an unknown user costs what the most common kind of
// record in the file costs: the dummy has its signature.
func TestDummyMatchesDominant(t *testing.T) {
	b4, _ := HashPassword([]byte("a"), 4)
	b5, _ := HashPassword([]byte("b"), 5)
	s1, _ := SCRAMRecord([]byte("c"), 1000)
	_, m7, _ := strings.Cut(mosquittoVector, ":")
	for _, tc := range []struct {
		name  string
		lines []string
		want  uint64
	}{
		{"empty file", nil, uint64(kindBcrypt)<<32 | uint64(DefaultCost)},
		{"bcrypt 5 wins", []string{"a:" + b4, "b:" + b5, "c:" + b5}, uint64(kindBcrypt)<<32 | 5},
		{"mosquitto wins", []string{"a:" + b4, "m:" + m7, "n:" + m7}, uint64(kindMosquitto)<<32 | 101},
		{"scram wins", []string{"s:" + s1, "t:" + s1, "a:" + b4}, uint64(kindSCRAM)<<32 | 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeTemp(t, "pw", strings.Join(tc.lines, "\n"))
			p, err := loadPasswords(file)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.dummy.signature(); got != tc.want {
				t.Fatalf("dummy signature %x, want %x", got, tc.want)
			}
			if p.dummy.verify([]byte("")) || p.dummy.verify([]byte("a")) {
				t.Error("the dummy verifies a password")
			}
		})
	}
}

func writeTemp(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// BenchmarkVerify measures one password check per kind of record, as the auth pool pays
// it for a CONNECT that misses the cache.
func BenchmarkVerify(b *testing.B) {
	bc, _ := HashPassword([]byte("pw"), DefaultCost)
	sc, _ := SCRAMRecord([]byte("pw"), DefaultIterations)
	_, m7, _ := strings.Cut(mosquittoVector, ":")
	for _, bm := range []struct{ name, rec string }{
		{"Kind=bcrypt/Cost=10", bc},
		{"Kind=mosquitto7/Iter=101", m7},
		{"Kind=scram/Iter=4096", sc},
	} {
		c := mustRecord(b, bm.rec)
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				c.verify([]byte("pw"))
			}
		})
	}
}

// BenchmarkTryAuthenticateCached measures a returning client admitted from the login
// cache, what a reconnect storm costs per client instead of a hash.
func BenchmarkTryAuthenticateCached(b *testing.B) {
	rec, _ := HashPassword([]byte("pw"), 4)
	a, err := New(conf.Auth{PasswordFile: writeTemp(b, "pw", "alice:"+rec+"\n")}, quiet)
	if err != nil {
		b.Fatal(err)
	}
	r := &Request{Username: "alice", HasUsername: true, Password: []byte("pw"), HasPassword: true}
	if _, err := a.Authenticate(r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := a.TryAuthenticate(r); !ok {
			b.Fatal("miss")
		}
	}
}
