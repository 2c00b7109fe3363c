package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// recordVersion is the version written into every record value. It changes
// only when the meaning of a field changes; a decoder refuses versions it does
// not know rather than guessing, because a misread allocation is a duplicate
// address waiting to happen.
const recordVersion = 1

// Limits on key parts. bbolt accepts keys up to 32 KiB; these are far tighter
// so a garbage owner is rejected at Put with a field name instead of bloating
// every page. CNI container IDs are typically 64 hex characters and Linux
// interface names are at most 15 bytes.
const (
	maxContainerIDLen = 512
	maxIfNameLen      = 64
	// keySep separates container ID and interface name in a key. NUL sorts
	// before every other byte, so byte order of keys equals the order of
	// (ContainerID, IfName) pairs, which is the documented List order.
	keySep = 0x00
)

// wireRecord is the on-disk JSON form of a Record (schema 1). It is kept
// separate from Record so the public type can change without silently
// changing the file format.
type wireRecord struct {
	V         int           `json:"v"`
	Owner     wireOwner     `json:"owner"`
	Network   string        `json:"network,omitempty"`
	Pod       wirePod       `json:"pod"`
	Addresses []wireAddress `json:"addresses,omitempty"`
	Created   time.Time     `json:"created"`
}

type wireOwner struct {
	ContainerID string `json:"container_id"`
	IfName      string `json:"ifname"`
}

type wirePod struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

type wireAddress struct {
	Pool    string `json:"pool"`
	Prefix  string `json:"prefix"`
	Gateway string `json:"gateway,omitempty"`
}

// FieldError reports an invalid field of a record or owner. Field is a path
// such as "owner.container_id" or "addresses[1].prefix".
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %s: %s", e.Field, e.Reason) }

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// CorruptError reports a record on disk that cannot be decoded. Key is the
// owner as printed by Owner.String (or the raw key, quoted, if the key itself
// is malformed), so an operator can find and remove it.
type CorruptError struct {
	Key string
	Err error // usually a *FieldError naming the field
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("record %q is corrupt: %v", e.Key, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes every CorruptError match ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// validateOwner checks the parts of an owner that the key encoding relies on.
// prefix is prepended to field names ("owner." for records).
func validateOwner(o Owner, prefix string) error {
	check := func(field, v string, max int) error {
		switch {
		case v == "":
			return &FieldError{Field: prefix + field, Reason: "must not be empty"}
		case len(v) > max:
			return &FieldError{Field: prefix + field, Reason: fmt.Sprintf("longer than %d bytes", max)}
		case strings.ContainsAny(v, "/\x00"):
			// '/' would make Owner.String ambiguous; NUL is the key separator.
			return &FieldError{Field: prefix + field, Reason: "must not contain '/' or NUL"}
		}
		return nil
	}
	if err := check("container_id", o.ContainerID, maxContainerIDLen); err != nil {
		return err
	}
	return check("ifname", o.IfName, maxIfNameLen)
}

// ownerKey encodes an owner as a bbolt key. The owner must be valid.
func ownerKey(o Owner) []byte {
	k := make([]byte, 0, len(o.ContainerID)+1+len(o.IfName))
	k = append(k, o.ContainerID...)
	k = append(k, keySep)
	return append(k, o.IfName...)
}

// parseKey is the inverse of ownerKey.
func parseKey(k []byte) (Owner, error) {
	i := bytes.IndexByte(k, keySep)
	if i < 0 {
		return Owner{}, &FieldError{Field: "key", Reason: "no separator between container ID and interface name"}
	}
	o := Owner{ContainerID: string(k[:i]), IfName: string(k[i+1:])}
	if err := validateOwner(o, "key."); err != nil {
		return Owner{}, err
	}
	return o, nil
}

// keyName renders a key for error messages: the owner if the key parses,
// otherwise the raw bytes (quoted by the caller's %q).
func keyName(k []byte) string {
	if o, err := parseKey(k); err == nil {
		return o.String()
	}
	return string(k)
}

// validateRecord checks a record before it is written, so one bad record is
// refused on its own and never fails a whole batch.
func validateRecord(r Record) error {
	if err := validateOwner(r.Owner, "owner."); err != nil {
		return err
	}
	if y := r.Created.UTC().Year(); y < 0 || y > 9999 {
		// RFC 3339 has four-digit years; JSON encoding would fail.
		return &FieldError{Field: "created", Reason: fmt.Sprintf("year %d outside 0..9999 in UTC", y)}
	}
	for i, a := range r.Addresses {
		// The field's name is built only for an error: Put validates every record.
		f := func(name string) string { return fmt.Sprintf("addresses[%d].%s", i, name) }
		if a.Pool == "" {
			return &FieldError{Field: f("pool"), Reason: "must not be empty"}
		}
		if !a.Prefix.IsValid() {
			return &FieldError{Field: f("prefix"), Reason: "must be a valid address/length"}
		}
		if a.Prefix.Addr().Zone() != "" {
			return &FieldError{Field: f("prefix"), Reason: "must not have a zone"}
		}
		if a.Gateway.IsValid() && a.Gateway.Is4() != a.Prefix.Addr().Is4() {
			return &FieldError{Field: f("gateway"), Reason: fmt.Sprintf("%s is not the same family as prefix %s", a.Gateway, a.Prefix)}
		}
	}
	return nil
}

// encodeRecord validates r and returns its key and value.
func encodeRecord(r Record) (key, value []byte, err error) {
	if err := validateRecord(r); err != nil {
		return nil, nil, err
	}
	return ownerKey(r.Owner), appendRecordJSON(make([]byte, 0, recordJSONSize(&r)), &r), nil
}

// decodeRecord decodes one key/value pair from the records bucket. It never
// panics; any problem is a *CorruptError naming the key and, through the
// wrapped *FieldError, the field.
func decodeRecord(key, value []byte) (Record, error) {
	r, err := decodeRecordRaw(key, value)
	if err != nil {
		return Record{}, &CorruptError{Key: keyName(key), Err: err}
	}
	return r, nil
}

func decodeRecordRaw(key, value []byte) (Record, error) {
	owner, err := parseKey(key)
	if err != nil {
		return Record{}, err
	}
	var w wireRecord
	if err := decodeWire(value, &w); err != nil {
		return Record{}, err
	}
	got := Owner{ContainerID: w.Owner.ContainerID, IfName: w.Owner.IfName}
	if got != owner {
		return Record{}, &FieldError{Field: "owner", Reason: fmt.Sprintf("%q does not match the key %q", got.String(), owner.String())}
	}
	r := Record{
		Owner:   owner,
		Network: w.Network,
		Pod:     Pod{Namespace: w.Pod.Namespace, Name: w.Pod.Name, UID: w.Pod.UID},
		Created: w.Created,
	}
	for i, wa := range w.Addresses {
		a, err := wa.address(i)
		if err != nil {
			return Record{}, err
		}
		r.Addresses = append(r.Addresses, a)
	}
	// The same rules as for Put: what decodes is something Put would accept.
	if err := validateRecord(r); err != nil {
		return Record{}, err
	}
	return r, nil
}

// decodeWire decodes value strictly into w, of this version.
func decodeWire(value []byte, w *wireRecord) error {
	dec := json.NewDecoder(bytes.NewReader(value))
	// Strict: an unknown field within a known version means corruption or a
	// writer that forgot to bump the version; either way, say so.
	dec.DisallowUnknownFields()
	err := dec.Decode(w)
	if err == nil && dec.More() {
		err = &FieldError{Field: "value", Reason: "trailing data after the record"}
	}
	if err != nil {
		return strictDecodeError(value, err)
	}
	if w.V == 0 { // version 0 never existed: the field is absent
		return &FieldError{Field: "v", Reason: "missing"}
	}
	if w.V != recordVersion {
		return versionError(w.V)
	}
	return nil
}

// strictDecodeError explains why value failed the strict decode with err. A record from
// another version fails it for reasons that are not the point; report the version instead.
func strictDecodeError(value []byte, err error) error {
	var head struct {
		V *int `json:"v"`
	}
	if json.Unmarshal(value, &head) == nil {
		if head.V == nil {
			return &FieldError{Field: "v", Reason: "missing"}
		}
		if *head.V != recordVersion {
			return versionError(*head.V)
		}
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe
	}
	return jsonFieldError(err)
}

// address converts addresses[i].
func (wa wireAddress) address(i int) (Address, error) {
	f := fmt.Sprintf("addresses[%d].", i)
	p, err := netip.ParsePrefix(wa.Prefix)
	if err != nil {
		return Address{}, &FieldError{Field: f + "prefix", Reason: err.Error()}
	}
	a := Address{Pool: wa.Pool, Prefix: p}
	if wa.Gateway != "" {
		g, err := netip.ParseAddr(wa.Gateway)
		if err != nil {
			return Address{}, &FieldError{Field: f + "gateway", Reason: err.Error()}
		}
		a.Gateway = g
	}
	return a, nil
}

func versionError(v int) error {
	return &FieldError{Field: "v", Reason: fmt.Sprintf("version %d not supported (want %d)", v, recordVersion)}
}

// jsonFieldError turns encoding/json errors into FieldErrors that name the
// field where the JSON says which one.
func jsonFieldError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return &FieldError{Field: te.Field, Reason: fmt.Sprintf("cannot use JSON %s as %s", te.Value, te.Type)}
	}
	const unknown = "json: unknown field "
	if msg := err.Error(); strings.HasPrefix(msg, unknown) {
		return &FieldError{Field: strings.Trim(strings.TrimPrefix(msg, unknown), `"`), Reason: "unknown field"}
	}
	var pe *time.ParseError
	if errors.As(err, &pe) {
		return &FieldError{Field: "created", Reason: err.Error()}
	}
	return &FieldError{Field: "value", Reason: err.Error()}
}
