package packet

import "bytes"

var (
	errTopicEmpty    = protocolErr("MQTT-4.7.3-1", "empty topic name")
	errTopicWildcard = malformed("MQTT-3.3.2-2", "wildcard in a topic name")
	errFilterEmpty   = malformed("MQTT-4.7.3-1", "empty topic filter")
	errFilterHash    = malformed("MQTT-4.7.1-2", "'#' not alone as the last level of a topic filter")
	errFilterPlus    = malformed("MQTT-4.7.1-3", "'+' not alone in its topic filter level")
	errShareName     = malformed("MQTT-4.8.2-1", "shared subscription name empty or holding '/', '+' or '#'")
	errShareFilter   = malformed("MQTT-4.8.2-2", "shared subscription without a topic filter")
	sharePrefix      = []byte("$share/")
)

// ValidTopicName checks a topic name of a PUBLISH or will message: at least one byte
// [MQTT-4.7.3-1] and no wildcard characters [MQTT-3.3.2-2], [MQTT-4.7.1-1]. UTF-8 has been
// checked by the decoder.
func ValidTopicName(t []byte) error {
	if len(t) == 0 {
		return errTopicEmpty
	}
	if bytes.IndexByte(t, '+') >= 0 || bytes.IndexByte(t, '#') >= 0 {
		return errTopicWildcard
	}
	return nil
}

// ValidTopicFilter checks a subscription's topic filter, shared ($share/name/filter) or
// not: '#' only as the whole last level, '+' only as a whole level, and a shared
// subscription's share name non-empty without '/', '+' or '#'.
func ValidTopicFilter(f []byte) error {
	if len(f) == 0 {
		return errFilterEmpty
	}
	if group, filter, ok := SplitShared(f); ok {
		if len(group) == 0 || bytes.IndexByte(group, '+') >= 0 || bytes.IndexByte(group, '#') >= 0 {
			return errShareName
		}
		if len(filter) == 0 {
			return errShareFilter
		}
		f = filter
	} else if bytes.HasPrefix(f, sharePrefix[:len(sharePrefix)-1]) && len(f) == len(sharePrefix)-1 {
		return errShareName // "$share" alone
	}
	for i, c := range f {
		switch c {
		case '#':
			if i != len(f)-1 || (i > 0 && f[i-1] != '/') {
				return errFilterHash
			}
		case '+':
			if (i > 0 && f[i-1] != '/') || (i < len(f)-1 && f[i+1] != '/') {
				return errFilterPlus
			}
		}
	}
	return nil
}

// SplitShared splits a "$share/{ShareName}/{filter}" subscription into its share name and
// filter (spec 4.8.2). ok is false for a filter that is not shared; "$share/name" without
// a second '/' is shared with an empty filter, which ValidTopicFilter refuses.
func SplitShared(f []byte) (group, filter []byte, ok bool) {
	if !bytes.HasPrefix(f, sharePrefix) {
		return nil, nil, false
	}
	rest := f[len(sharePrefix):]
	i := bytes.IndexByte(rest, '/')
	if i < 0 {
		return rest, nil, true
	}
	return rest[:i], rest[i+1:], true
}
