package auth

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// Password hashes: the second field of a password file line. See the package doc for
// why bcrypt; the other two kinds exist for migration (Mosquitto) and for SCRAM.
const (
	// DefaultCost is the bcrypt cost bifrost passwd writes: about 70 ms per check on a
	// server core, several times that on a small ARM device (see the package doc).
	DefaultCost = bcrypt.DefaultCost
	// DefaultIterations is the PBKDF2 iteration count of a SCRAM record, RFC 7677's
	// minimum recommendation.
	DefaultIterations = 4096
	// maxIterations bounds a record's iteration count, so that a typo in a file cannot
	// make every check take minutes.
	maxIterations = 10_000_000
	// maxBcryptPassword is bcrypt's input limit; it ignores what lies beyond.
	maxBcryptPassword = 72
)

// Record prefixes.
const (
	prefixMosquitto = "$7$"             // Mosquitto 2.0: PBKDF2-HMAC-SHA512
	prefixSHA512    = "$6$"             // Mosquitto 1.x: one salted SHA-512; refused
	prefixSCRAM     = "$scram-sha-256$" // bifrost: SCRAM-SHA-256 keys (RFC 5802/7677)
)

// A hashKind is the kind of a password record.
type hashKind uint8

const (
	kindBcrypt    hashKind = iota + 1
	kindMosquitto          // $7$
	kindSCRAM              // $scram-sha-256$
)

// A credential is one user's decoded password record.
type credential struct {
	kind hashKind
	cost int    // bcrypt cost, or PBKDF2 iterations
	salt []byte // $7$ and SCRAM
	hash []byte // bcrypt: the encoded hash; $7$: the derived key; SCRAM: StoredKey
	srv  []byte // SCRAM: ServerKey
}

// signature groups credentials that take the same time to verify.
func (c *credential) signature() uint64 { return uint64(c.kind)<<32 | uint64(c.cost) }

// verify reports whether pw is the password c was made from. The comparison is constant
// time; the work depends only on the record, never on where pw differs.
func (c *credential) verify(pw []byte) bool {
	switch c.kind {
	case kindBcrypt:
		tooLong := len(pw) > maxBcryptPassword
		if tooLong {
			// bcrypt would silently use the first 72 bytes; pay for the hash anyway so
			// that the answer takes the usual time, and refuse.
			pw = pw[:maxBcryptPassword]
		}
		return bcrypt.CompareHashAndPassword(c.hash, pw) == nil && !tooLong
	case kindMosquitto:
		dk, err := pbkdf2.Key(sha512.New, string(pw), c.salt, c.cost, len(c.hash))
		return err == nil && subtle.ConstantTimeCompare(dk, c.hash) == 1
	case kindSCRAM:
		stored, _ := scramKeys(pw, c.salt, c.cost)
		return subtle.ConstantTimeCompare(stored, c.hash) == 1
	}
	return false
}

// parseRecord decodes a password record. Its errors never quote the record: it is a
// secret, if a hashed one.
func parseRecord(rec string) (credential, error) {
	switch {
	case strings.HasPrefix(rec, "$2a$"), strings.HasPrefix(rec, "$2b$"), strings.HasPrefix(rec, "$2y$"):
		cost, err := bcrypt.Cost([]byte(rec))
		if err != nil {
			return credential{}, errors.New("malformed bcrypt hash")
		}
		return credential{kind: kindBcrypt, cost: cost, hash: []byte(rec)}, nil
	case strings.HasPrefix(rec, prefixMosquitto):
		// $7$<iterations>$<salt b64>$<key b64>, as mosquitto_passwd 2.0 writes it
		// (eclipse-mosquitto/mosquitto src/security_default.c, unpwd__decode_passwords and
		// pw__digest: PBKDF2-HMAC-SHA512, 12-byte salt, 64-byte key, 101 iterations).
		f := strings.Split(rec[len(prefixMosquitto):], "$")
		if len(f) != 3 {
			return credential{}, errors.New("malformed $7$ hash: want $7$iterations$salt$hash")
		}
		iter, err := iterations(f[0])
		if err != nil {
			return credential{}, err
		}
		salt, err1 := base64.StdEncoding.DecodeString(f[1])
		key, err2 := base64.StdEncoding.DecodeString(f[2])
		if err1 != nil || err2 != nil || len(salt) == 0 || len(key) != sha512.Size {
			return credential{}, errors.New("malformed $7$ hash: salt or key is not valid base64 of the right length")
		}
		return credential{kind: kindMosquitto, cost: iter, salt: salt, hash: key}, nil
	case strings.HasPrefix(rec, prefixSCRAM):
		f := strings.Split(rec[len(prefixSCRAM):], "$")
		if len(f) != 4 {
			return credential{}, errors.New("malformed SCRAM record: want $scram-sha-256$iterations$salt$StoredKey$ServerKey")
		}
		iter, err := iterations(f[0])
		if err != nil {
			return credential{}, err
		}
		salt, err1 := base64.StdEncoding.DecodeString(f[1])
		stored, err2 := base64.StdEncoding.DecodeString(f[2])
		server, err3 := base64.StdEncoding.DecodeString(f[3])
		if err1 != nil || err2 != nil || err3 != nil || len(salt) == 0 ||
			len(stored) != sha256.Size || len(server) != sha256.Size {
			return credential{}, errors.New("malformed SCRAM record: a field is not valid base64 of the right length")
		}
		return credential{kind: kindSCRAM, cost: iter, salt: salt, hash: stored, srv: server}, nil
	case strings.HasPrefix(rec, prefixSHA512):
		return credential{}, errors.New("$6$ (Mosquitto 1.x, a single salted SHA-512) is too fast to resist guessing; set the password again with bifrost passwd")
	case rec == "":
		return credential{}, errors.New("no password hash")
	}
	return credential{}, errors.New("unknown password hash: bifrost reads bcrypt ($2a$, $2b$, $2y$), Mosquitto's $7$ and $scram-sha-256$; a plain-text password is not accepted")
}

func iterations(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxIterations {
		return 0, fmt.Errorf("iteration count must be a number in 1..%d", maxIterations)
	}
	return n, nil
}

// HashPassword returns the bcrypt record of pw at the given cost (0: DefaultCost), for a
// password file. pw must be 1 to 72 bytes: bcrypt ignores anything longer.
func HashPassword(pw []byte, cost int) (string, error) {
	if err := checkPassword(pw); err != nil {
		return "", err
	}
	if len(pw) > maxBcryptPassword {
		return "", fmt.Errorf("auth: a bcrypt password is at most %d bytes; use a SCRAM record for longer ones", maxBcryptPassword)
	}
	if cost == 0 {
		cost = DefaultCost
	}
	if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		// bcrypt would quietly use its default for a cost below the minimum.
		return "", fmt.Errorf("auth: bcrypt cost %d is not in %d..%d", cost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	h, err := bcrypt.GenerateFromPassword(pw, cost)
	if err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	return string(h), nil
}

// SCRAMRecord returns the SCRAM-SHA-256 record of pw with a fresh 16-byte salt and the
// given iteration count (0: DefaultIterations):
//
//	$scram-sha-256$<iterations>$<salt>$<StoredKey>$<ServerKey>
//
// in standard base64 with padding, the keys as RFC 5802 section 3 defines them. It serves
// SCRAM exchanges and verifies plain CONNECT passwords too.
func SCRAMRecord(pw []byte, iter int) (string, error) {
	if err := checkPassword(pw); err != nil {
		return "", err
	}
	if iter == 0 {
		iter = DefaultIterations
	}
	if iter < 1 || iter > maxIterations {
		return "", fmt.Errorf("auth: iteration count must be in 1..%d", maxIterations)
	}
	salt := make([]byte, 16)
	randomKey(salt)
	stored, server := scramKeys(pw, salt, iter)
	b := base64.StdEncoding
	return fmt.Sprintf("%s%d$%s$%s$%s", prefixSCRAM, iter, b.EncodeToString(salt),
		b.EncodeToString(stored), b.EncodeToString(server)), nil
}

func checkPassword(pw []byte) error {
	if len(pw) == 0 {
		return errors.New("auth: empty password")
	}
	if len(pw) > 65535 {
		return errors.New("auth: a password is at most 65535 bytes (the MQTT limit)")
	}
	return nil
}

// scramKeys derives StoredKey and ServerKey from a password (RFC 5802 section 3):
//
//	SaltedPassword = Hi(password, salt, i)   (PBKDF2-HMAC-SHA-256)
//	StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
//	ServerKey      = HMAC(SaltedPassword, "Server Key")
//
// The password is used as given, without SASLprep: the same for every ASCII password.
func scramKeys(pw, salt []byte, iter int) (stored, server []byte) {
	salted, err := pbkdf2.Key(sha256.New, string(pw), salt, iter, sha256.Size)
	if err != nil {
		// Only FIPS 140-only mode refuses these parameters; a check must still fail.
		salted = make([]byte, sha256.Size)
		randomKey(salted)
	}
	ck := hmacSHA256(salted, []byte("Client Key"))
	sk := sha256.Sum256(ck)
	return sk[:], hmacSHA256(salted, []byte("Server Key"))
}

func hmacSHA256(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// randomKey fills b from the system's random source; crypto/rand does not fail.
func randomKey(b []byte) {
	_, _ = rand.Read(b)
}

// dummyFor returns a credential of signature sig made from a random password: what an
// unknown user is checked against, so that refusing one costs what refusing a known user
// with that kind of record does.
func dummyFor(sig uint64) credential {
	kind, cost := hashKind(sig>>32), int(uint32(sig))
	pw := make([]byte, 16)
	randomKey(pw)
	switch kind {
	case kindMosquitto:
		salt, key := make([]byte, 12), make([]byte, sha512.Size)
		randomKey(salt)
		randomKey(key)
		return credential{kind: kindMosquitto, cost: cost, salt: salt, hash: key}
	case kindSCRAM:
		salt, stored := make([]byte, 16), make([]byte, sha256.Size)
		randomKey(salt)
		randomKey(stored)
		return credential{kind: kindSCRAM, cost: cost, salt: salt, hash: stored, srv: stored}
	}
	if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		cost = DefaultCost
	}
	h, err := bcrypt.GenerateFromPassword(pw, cost)
	if err != nil {
		panic(err) // only a bad cost fails, and the cost is checked above
	}
	return credential{kind: kindBcrypt, cost: cost, hash: h}
}
