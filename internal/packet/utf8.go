package packet

import "unicode/utf8"

var errUTF8 = malformed("MQTT-1.5.4-1", "ill-formed UTF-8 or a disallowed code point in a string")

// ValidUTF8 reports whether b is a UTF-8 Encoded String as MQTT allows it: well-formed
// UTF-8 without surrogates [MQTT-1.5.4-1] and without U+0000 [MQTT-1.5.4-2]. Like
// Mosquitto it also refuses the code points the spec says SHOULD NOT appear (controls
// U+0001..U+001F and U+007F..U+009F, and the non-characters), which it allows a receiver to
// treat as malformed: they have no business in topics, client ids or user names, and
// refusing them closes a door on log and terminal injection.
func ValidUTF8(b []byte) bool {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return false // ill-formed, overlong or a surrogate
		}
		if r <= 0x9f || (r >= 0xfdd0 && r <= 0xfdef) || r&0xfffe == 0xfffe {
			return false
		}
		i += n
	}
	return true
}
