// Package auth is bifrost's authentication and topic access control: who may connect
// (anonymous access, a password file, SCRAM-SHA-256 enhanced authentication) and what
// each client may publish, subscribe to and receive (an ACL file in Mosquitto's syntax).
//
// An Auth is one auth block of the configuration in force (conf.Auth); a Set holds the
// Auth of every listener. The broker calls Authenticate on its auth pool (a password hash
// is slow on purpose), TryAuthenticate and Allow on the event loop (they never block and
// Allow never allocates), and a Method's exchange on the auth pool. Reload re-reads the
// files (SIGHUP) and keeps the old state when they are broken; every check runs on an
// immutable snapshot taken when it starts.
//
// Files: auth.go the API and the Auth; hash.go password records; passwd.go the password
// file; cache.go the login cache; acl.go the ACL file; aclmatch.go access checks;
// scram.go SCRAM-SHA-256; set.go per-listener Auths; gate.go the Gate that holds a
// cluster node's CONNECTs; errors.go file errors.
//
// # Who a client is
//
// With a password file, a client that sends a username must send that user's password;
// an unknown user, a wrong password, a username without a password or a password without
// a username is refused with ErrBadCredentials (v5 0x86). A client that sends neither is
// anonymous: admitted if allow_anonymous is true (unset: it is false with a password
// file), else refused with ErrNotAuthorized (0x87). Result.Username, the ACL identity, is
// the checked username, "" when anonymous.
//
// Without a password file nothing can be checked, so a username carries no rights: the
// client is anonymous (the ACL's anonymous rules apply and %u matches nothing). Mosquitto
// instead takes such a username as the ACL identity, which lets any client claim any
// user's rules.
//
// # Password hashes: bcrypt
//
// bifrost passwd writes bcrypt (cost 10 by default) rather than argon2id. argon2id is the
// stronger design against GPUs because it is memory-hard, and memory is the point: its
// recommended settings take 19 to 64 MiB per check (OWASP; RFC 9106), so a burst of
// concurrent logins on a gateway with 170 MB shared among several services, where the
// broker aims at 15 MB of RSS, would need several times the broker's whole budget, and
// lowering the memory cost to fit throws away what makes argon2id better. bcrypt works in
// 4 KiB of state whatever the load, and is still costly to guess offline (about 70 ms
// per check here at cost 10; a small ARM core takes several times that). The cost of a
// check is what the login cache below is for.
//
// Three kinds of record are read:
//
//	$2a$/$2b$/$2y$...                      bcrypt, as bifrost passwd writes it
//	$7$<iterations>$<salt>$<key>             Mosquitto 2.0's PBKDF2-HMAC-SHA512 (read only)
//	$scram-sha-256$<iterations>$<salt>$<StoredKey>$<ServerKey>
//
// $7$ is read as eclipse-mosquitto/mosquitto src/security_default.c (2.0,
// unpwd__decode_passwords and pw__digest) decodes it: standard base64 salt and key, the
// key PBKDF2-HMAC-SHA512 of the password over the salt, 64 bytes (mosquitto_passwd uses a
// 12-byte salt and 101 iterations), so a Mosquitto password file can be used as it is and
// its users moved to bcrypt one at a time. Mosquitto 1.x's $6$ (one salted SHA-512,
// cheap to brute-force) is refused with a message saying so; Mosquitto still reads it.
//
// The SCRAM record (bifrost passwd -scram) holds RFC 5802's StoredKey and ServerKey, in
// standard base64 with the salt (16 random bytes) and the PBKDF2-HMAC-SHA-256 iteration
// count (4096 by default, RFC 7677's minimum). It serves SCRAM exchanges, and a plain
// CONNECT password is checked against it by deriving StoredKey again. Passwords are used
// as bytes, without SASLprep: the same for every ASCII password.
//
// Every comparison of derived keys is constant time. An unknown user is checked against
// a dummy record of the file's most common kind and cost, made from a random password at
// load, so refusing it takes as long as refusing a known user: the time of an answer does
// not tell which users exist (Mosquitto answers an unknown user at once). Users of a
// rarer kind of record than the file's most common one can still be told apart from
// unknown users by time; move them to the same kind.
//
// Secrets are never logged: no password, hash, salt, proof or signature appears in a
// log line or an error, at any level. Errors name the file, the line and the user.
//
// # The login cache
//
// A reconnect storm after a network blip would cost one bcrypt check per client; the
// cache (cache.go) remembers successful logins for cache_ttl (2m) as HMAC tags under a
// per-process random key, at most cache_size of them, so that TryAuthenticate admits a
// returning client at once. Failures are never cached. The price is that, while an entry
// lives, a copy of the process memory allows guessing that password at HMAC speed. A
// reload empties the cache.
//
// # The ACL file, and how it compares with Mosquitto's acl_file
//
// The syntax is Mosquitto's (mosquitto.conf(5), acl_file; implementation in
// eclipse-mosquitto/mosquitto src/security_default.c, aclfile__parse and
// mosquitto_acl_check_default), point by point:
//
//   - Same: "topic [read|write|readwrite|deny] <filter>", "pattern [...] <filter>",
//     "user <name>", # comments; without an access word a rule is readwrite, and a
//     filter containing a blank needs one ("topic read" is a rule for the topic "read",
//     as in Mosquitto). topic lines before the first user line are the anonymous
//     clients' rules; pattern lines apply to every client, including users with a
//     section; a user without a section has only the patterns. An unknown keyword or an
//     invalid filter is an error, as in Mosquitto 2.0.
//   - Same: a rule whose first level is + or # does not match topics starting with $;
//     reading $SYS needs a rule naming it [MQTT-4.7.2-1].
//   - Lenient: blanks before a keyword or a comment, and tabs between words, are
//     accepted; Mosquitto splits on spaces only and calls an indented comment invalid.
//   - Stricter: %u and %c must be a whole level ("devices/%c/#"). Mosquitto's manual says
//     so but its code substitutes anywhere, so "dev-%c" would let a client id choose
//     where the level ends. A pattern rule without %u or %c is accepted with a warning,
//     as Mosquitto does.
//   - Deny wins: any deny rule that matches refuses, wherever it is. Mosquitto puts deny
//     rules first in each list, but checks the user's topic rules before the patterns and
//     stops at the first match, so a user's grant beats a deny pattern.
//   - Unsafe identities: a username or client id containing +, # or / never matches %u
//     or %c: an allow pattern naming it grants nothing, and a deny pattern naming it
//     denies everything (fail closed); the client's other rules still apply. Mosquitto
//     2.0, when pattern rules exist, denies such a client every check its own topic rules
//     did not grant, but tests only + and # (1.x tested / too; CVE-2017-7650): bifrost
//     keeps /, since user "a/b" under "users/%u/#" would reach user a's subtree.
//   - An identity substituted in the first level never reaches a $-topic: client id
//     "$SYS" under "pattern read %c/#" does not read $SYS, as it would in Mosquitto.
//   - Subscribing: Mosquitto 2.0's acl_file grants every SUBSCRIBE ("FIXME - implement
//     ACL subscription strings" in mosquitto_acl_check_default) and checks read access
//     at each delivery; with only "topic read a/#", mosquitto 2.0.11 grants SUBSCRIBE #
//     and delivers a/x but not b/x. bifrost refuses a SUBSCRIBE (0x87) whose filter no
//     read rule can match any topic of (b/# there), or that a deny rule covers whole
//     (a/private/# under "topic deny a/private/#"), and grants the others. A filter such
//     as # that covers both readable and unreadable topics is granted, and only what is
//     readable is delivered: Covers reports false for it, so the broker checks Read at
//     each delivery, as Mosquitto does for every message. For a filter inside one read
//     rule and clear of every deny rule (a/+/b under a/#), Covers is true and deliveries
//     need no check.
//   - Topic names have no path semantics: "a/../b" is three literal levels and matches
//     a/# and never b/#. NUL cannot occur (the codec refuses it).
//
// Without an ACL file everything is allowed.
package auth
