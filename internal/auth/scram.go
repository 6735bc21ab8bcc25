package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strconv"
	"strings"
)

// SCRAM-SHA-256 (RFC 5802, RFC 7677) as an MQTT v5 enhanced authentication method, server
// side. The Authentication Data of CONNECT, AUTH and CONNACK carry the SCRAM messages:
//
//	client → CONNECT   (Authentication Method "SCRAM-SHA-256", Data client-first-message)
//	server → AUTH 0x18 (server-first-message: the nonce, salt and iteration count)
//	client → AUTH 0x18 (client-final-message: the proof)
//	server → CONNACK   (server-final-message: the server's signature), or a refusal
//
// The server keeps StoredKey and ServerKey, never the password, in a $scram-sha-256$
// record of the password file (SCRAMRecord). Channel binding is not offered: the client
// must send the gs2 flag "n" (or "y": it could bind but believes the server cannot, which
// is true). An authorization identity other than the user itself is refused.
//
// A user who does not exist, or has no SCRAM record, gets a normal-looking
// server-first-message with a salt derived from the username under a key of this Auth,
// stable across attempts, and fails at the proof as a wrong password does: the exchange
// does not tell which users exist (RFC 5802 section 9 suggests this).

// ScramSHA256 is the method's name, the CONNECT's Authentication Method.
const ScramSHA256 = "SCRAM-SHA-256"

// errSCRAM refuses a malformed or unsupported message: a client that does not follow
// the mechanism is not one that may connect.
var errSCRAM = ErrNotAuthorized

// scramNonce returns the server's part of a nonce: 18 random bytes in base64. Tests
// replace it to replay RFC 7677's example.
var scramNonce = func() string {
	var b [18]byte
	randomKey(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

type scramMethod struct{ a *Auth }

func (scramMethod) Name() string { return ScramSHA256 }

// Start begins an exchange on the state in force now; a reload during the exchange does
// not change it.
func (m scramMethod) Start(r *Request) Exchange {
	x := &scramExchange{s: m.a.state.Load()}
	if r != nil && r.HasUsername {
		x.connUser, x.hasConnUser = r.Username, true
	}
	return x
}

// scramExchange is one conversation. Steps come one at a time (the broker's contract).
type scramExchange struct {
	s           *state
	connUser    string // the CONNECT's username, if it had one: SCRAM's must be the same
	hasConnUser bool
	step        int

	user        string
	cred        credential // a SCRAM credential; a stand-in for an unknown user
	known       bool
	gs2         string // the client-first-message's gs2 header, which c= must repeat
	firstBare   string // client-first-message-bare
	serverFirst string
	nonce       string // client nonce + server nonce
}

// Step implements Exchange.
func (x *scramExchange) Step(in []byte) (out []byte, done bool, res Result, err error) {
	defer func() { x.step++ }()
	switch x.step {
	case 0:
		out, err = x.first(string(in))
		return out, false, Result{}, err
	case 1:
		out, err = x.final(string(in))
		if err != nil {
			return nil, false, Result{}, err
		}
		return out, true, Result{Username: x.user}, nil
	}
	return nil, false, Result{}, errSCRAM
}

// first reads the client-first-message and answers with the server-first-message.
func (x *scramExchange) first(msg string) ([]byte, error) {
	if x.s.users == nil {
		return nil, ErrNotAuthorized
	}
	// gs2-header: flag "," [authzid] ","
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok || flag != "n" && flag != "y" {
		return nil, errSCRAM // "p=...": channel binding, not offered
	}
	authzid, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, errSCRAM
	}
	x.gs2 = flag + "," + authzid + ","
	x.firstBare = bare
	attrs := strings.Split(bare, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "n=") || !strings.HasPrefix(attrs[1], "r=") {
		return nil, errSCRAM // also refuses the reserved m= extension, which must fail
	}
	user, ok := saslName(attrs[0][2:])
	cnonce := attrs[1][2:]
	if !ok || user == "" || cnonce == "" || !printable(cnonce) || !extensions(attrs[2:]) {
		return nil, errSCRAM
	}
	if authzid != "" {
		if z, ok := saslName(strings.TrimPrefix(authzid, "a=")); !ok || !strings.HasPrefix(authzid, "a=") || z != user {
			return nil, ErrNotAuthorized
		}
	}
	if x.hasConnUser && x.connUser != user {
		return nil, ErrBadCredentials
	}
	x.user = user
	if c, ok := x.s.users.byName[user]; ok && c.kind == kindSCRAM {
		x.cred, x.known = c, true
	} else {
		fake := hmacSHA256(x.s.key, []byte("scram salt\x00"+user))
		x.cred = credential{kind: kindSCRAM, cost: x.s.users.scramIter, salt: fake[:16],
			hash: make([]byte, sha256.Size), srv: make([]byte, sha256.Size)}
	}
	x.nonce = cnonce + scramNonce()
	x.serverFirst = "r=" + x.nonce + ",s=" + base64.StdEncoding.EncodeToString(x.cred.salt) +
		",i=" + strconv.Itoa(x.cred.cost)
	return []byte(x.serverFirst), nil
}

// final checks the client-final-message's proof and answers with the server's signature.
func (x *scramExchange) final(msg string) ([]byte, error) {
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return nil, errSCRAM
	}
	withoutProof, proofB64 := msg[:i], msg[i+3:]
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "c=") || !strings.HasPrefix(attrs[1], "r=") || !extensions(attrs[2:]) {
		return nil, errSCRAM
	}
	cb, err := base64.StdEncoding.DecodeString(attrs[0][2:])
	if err != nil || string(cb) != x.gs2 {
		return nil, errSCRAM // the channel binding data must repeat the gs2 header
	}
	if subtle.ConstantTimeCompare([]byte(attrs[1][2:]), []byte(x.nonce)) != 1 {
		return nil, errSCRAM
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != sha256.Size {
		return nil, errSCRAM
	}
	authMessage := []byte(x.firstBare + "," + x.serverFirst + "," + withoutProof)
	// ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage); valid if H(ClientKey) = StoredKey.
	sig := hmacSHA256(x.cred.hash, authMessage)
	for k := range sig {
		sig[k] ^= proof[k]
	}
	h := sha256.Sum256(sig)
	if subtle.ConstantTimeCompare(h[:], x.cred.hash) != 1 || !x.known {
		return nil, ErrBadCredentials
	}
	m := hmac.New(sha256.New, x.cred.srv)
	m.Write(authMessage)
	return []byte("v=" + base64.StdEncoding.EncodeToString(m.Sum(nil))), nil
}

// saslName decodes a SCRAM saslname: "=2C" is ',' and "=3D" is '='; any other '=' is
// malformed.
func saslName(s string) (string, bool) {
	if !strings.Contains(s, "=") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// extensions reports whether attrs are well-formed optional attributes (a letter, '=',
// a value), which are ignored.
func extensions(attrs []string) bool {
	for _, a := range attrs {
		if len(a) < 2 || a[1] != '=' || !('a' <= a[0] && a[0] <= 'z' || 'A' <= a[0] && a[0] <= 'Z') {
			return false
		}
	}
	return true
}

// printable reports whether a nonce holds only RFC 5802's printable characters.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == ',' {
			return false
		}
	}
	return true
}
