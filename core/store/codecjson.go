package store

import (
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendRecordJSON appends the JSON of r's wire form (wireRecord) exactly as
// encoding/json.Marshal writes it (field order, omitempty, HTML-safe string escaping,
// RFC 3339 time), without reflection or the intermediate strings: Put encodes every record
// on the caller's goroutine, and json.Marshal was about 7% of the CPU of a durable
// allocation through the daemon (BenchmarkAPIAllocate). The bytes on disk do not change,
// so files written before and after read alike; FuzzEncodeRecord holds the two encoders
// to the same output. r must be valid (validateRecord).
func appendRecordJSON(b []byte, r *Record) []byte {
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, recordVersion, 10)
	b = append(b, `,"owner":{"container_id":`...)
	b = appendJSONString(b, r.Owner.ContainerID)
	b = append(b, `,"ifname":`...)
	b = appendJSONString(b, r.Owner.IfName)
	b = append(b, '}')
	if r.Network != "" {
		b = append(b, `,"network":`...)
		b = appendJSONString(b, r.Network)
	}
	b = append(b, `,"pod":{`...)
	sep := false
	for _, f := range [...]struct{ name, v string }{{`"namespace":`, r.Pod.Namespace}, {`"name":`, r.Pod.Name}, {`"uid":`, r.Pod.UID}} {
		if f.v == "" {
			continue
		}
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(b, f.name...)
		b = appendJSONString(b, f.v)
	}
	b = append(b, '}')
	b = appendAddressesJSON(b, r.Addresses)
	b = append(b, `,"created":"`...)
	// UTC and no monotonic reading: what is read back equals what was meant, whatever the
	// local zone of the writer.
	b = r.Created.UTC().Round(0).AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...)
}

func appendAddressesJSON(b []byte, as []Address) []byte {
	if len(as) == 0 {
		return b
	}
	b = append(b, `,"addresses":[`...)
	for i, a := range as {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"pool":`...)
		b = appendJSONString(b, a.Pool)
		// A valid prefix without a zone (validateRecord) is digits, dots, colons, hex
		// letters and a slash: nothing to escape.
		b = append(b, `,"prefix":"`...)
		b = a.Prefix.AppendTo(b)
		b = append(b, '"')
		if a.Gateway.IsValid() {
			b = append(b, `,"gateway":`...)
			b = appendAddr(b, a.Gateway)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// recordJSONSize is enough room for r's JSON unless its strings need escaping, so
// encodeRecord allocates its value once.
func recordJSONSize(r *Record) int {
	n := 160 + len(r.Owner.ContainerID) + len(r.Owner.IfName) + len(r.Network) + len(r.Pod.Namespace) + len(r.Pod.Name) + len(r.Pod.UID)
	for _, a := range r.Addresses {
		n += 140 + len(a.Pool)
	}
	return n
}

// appendAddr appends a's text as appendJSONString would: an address without a zone is
// digits, dots, colons and hex letters, which need no escaping.
func appendAddr(b []byte, a netip.Addr) []byte {
	if a.Zone() != "" {
		return appendJSONString(b, a.String())
	}
	b = append(b, '"')
	b = a.AppendTo(b)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// jsonSafe marks the ASCII bytes a JSON string holds as they are (encoding/json's
// htmlSafeSet): printable, and neither a quote, a backslash nor <, > or &.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendJSONString appends s quoted as encoding/json does with HTML escaping (its default):
// <, > and & as \u003c, \u003e, \u0026, U+2028 and U+2029 escaped, invalid UTF-8 as
// \ufffd, and the short escapes \b \f \n \r \t.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
