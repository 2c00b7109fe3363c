// Package protoerr names the field at fault when generated code refuses a message.
//
// The generated decoders (protoc-gen-go-vtproto's UnmarshalVT) say what is wrong ("unexpected
// EOF", "wrong wireType = 0 for field IfName") but not where: a peer sending a bad message
// deserves an error naming the field by its path, as the JSON API names it
// ("allocate.owner.ifName"). Decoding succeeds almost always, so the path is found only after
// a failure, by walking the bytes again against the message's descriptor (Locate); the hot
// path stays free of reflection.
package protoerr

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Locate explains why b does not decode as a message of md: the error names the first bad
// field by its path of JSON names under root ("allocate.pools[1]: not valid UTF-8"). cause,
// the generated decoder's error, is wrapped when the walk finds nothing more precise.
func Locate(root string, md protoreflect.MessageDescriptor, b []byte, cause error) error {
	if err := walk(root, md, b); err != nil {
		return err
	}
	if cause == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", root, cause)
}

// walk checks every field of one message, recursing into nested messages.
func walk(path string, md protoreflect.MessageDescriptor, b []byte) error {
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		key, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return fmt.Errorf("%s: bad field key", path)
		}
		num, typ := protowire.DecodeTag(key)
		if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
			return fmt.Errorf("%s: field number %d out of range", path, key>>3)
		}
		if typ == protowire.StartGroupType || typ == protowire.EndGroupType || typ > protowire.Fixed32Type {
			return fmt.Errorf("%s: field %d: unsupported wire type %d", path, num, typ)
		}
		b = b[n:]
		vn := protowire.ConsumeFieldValue(num, typ, b)
		if vn < 0 {
			return fmt.Errorf("%s: field %d: %s", path, num, valueProblem(typ, protowire.ParseError(vn)))
		}
		fd := md.Fields().ByNumber(num)
		if fd != nil {
			name := fd.JSONName()
			if fd.IsList() {
				name = fmt.Sprintf("%s[%d]", name, seen[num])
				seen[num]++
			}
			if err := checkField(path+"."+name, fd, typ, b[:vn]); err != nil {
				return err
			}
		}
		b = b[vn:]
	}
	return nil
}

func valueProblem(typ protowire.Type, err error) string {
	switch typ {
	case protowire.BytesType:
		return "length runs past the end of the message"
	case protowire.VarintType:
		return "bad varint"
	case protowire.Fixed32Type:
		return "truncated fixed32"
	case protowire.Fixed64Type:
		return "truncated fixed64"
	}
	return err.Error()
}

// checkField checks one known field's value (v is the whole encoded value, length included).
func checkField(path string, fd protoreflect.FieldDescriptor, typ protowire.Type, v []byte) error {
	want := wireType(fd.Kind())
	if typ != want && !(typ == protowire.BytesType && fd.IsList() && want != protowire.BytesType) {
		return fmt.Errorf("%s: wire type %d, want %s", path, typ, kindName(fd.Kind()))
	}
	if typ != protowire.BytesType || want != protowire.BytesType {
		return nil
	}
	data, _ := protowire.ConsumeBytes(v)
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.Valid(data) {
			return fmt.Errorf("%s: not valid UTF-8", path)
		}
	case protoreflect.MessageKind:
		return walk(path, fd.Message(), data)
	}
	return nil
}

func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return protowire.Fixed64Type
	case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return protowire.Fixed32Type
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.VarintType
}

func kindName(k protoreflect.Kind) string {
	switch k {
	case protoreflect.MessageKind:
		return "a message"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "bytes"
	}
	return wireName(wireType(k))
}

func wireName(t protowire.Type) string {
	switch t {
	case protowire.Fixed64Type:
		return "fixed64"
	case protowire.Fixed32Type:
		return "fixed32"
	}
	return "varint"
}
