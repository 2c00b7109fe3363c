package cniplugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/allot-ipam/allot/core/api"
)

// DefaultTimeout bounds every call to allotd when the ipam config sets no timeout.
const DefaultTimeout = 30 * time.Second

// Config is one call's network configuration (stdin), parsed and validated.
type Config struct {
	CNIVersion string
	// Network is the configuration's "name": allocations and GC are scoped to it.
	Network string
	Socket  string
	Timeout time.Duration
	// Pools, DefaultIPv4Pools and DefaultIPv6Pools are ipam.pools, ipam.default_ipv4_ippool
	// and ipam.default_ipv6_ippool, passed to the daemon's pool policy as they are.
	Pools            []string
	DefaultIPv4Pools []string
	DefaultIPv6Pools []string
	// IPs are the addresses requested by runtimeConfig.ips and args.cni.ips, in that order,
	// without duplicates. CNI_ARGS IP= is added by MergeIPs.
	IPs []RequestedIP
	// PrevResult is the raw prevResult (CHECK only); nil when absent.
	PrevResult json.RawMessage
	// ValidAttachments is cni.dev/valid-attachments (GC only), sorted.
	ValidAttachments []api.Owner
}

// RequestedIP is one specific address the runtime asks for.
type RequestedIP struct {
	// Value is the address as given: a plain address or a CIDR.
	Value string
	Addr  netip.Addr
	// Field says where it came from ("runtimeConfig.ips[0]", "CNI_ARGS IP[1]"), so errors
	// about it, ours or the daemon's, name what the user wrote.
	Field string
	// FromEnv is true for CNI_ARGS: errors about it are CNI code 4, not 7.
	FromEnv bool
}

// ipamKeys are the keys the ipam block may hold. Unknown keys are refused: a misspelt
// "pool" silently ignored would hand out addresses from the wrong pool.
var ipamKeys = []string{"default_ipv4_ippool", "default_ipv6_ippool", "pools", "socket", "timeout", "type"}

// ParseConfig decodes and validates the network configuration a CNI call gets on stdin.
// Errors are *types.Error: code 6 when a field has the wrong JSON type, 7 when a value is
// wrong; both name the field.
func ParseConfig(stdin []byte) (*Config, error) {
	top, terr := decodeObject(stdin, "network configuration")
	if terr != nil {
		return nil, terr
	}
	c := &Config{Socket: api.DefaultSocket, Timeout: DefaultTimeout}
	var err *types.Error
	if c.CNIVersion, err = decodeString(top["cniVersion"], "cniVersion"); err != nil {
		return nil, err
	}
	if c.CNIVersion == "" {
		// libcni (version.ConfigDecoder) and skel read a configuration without cniVersion
		// as 0.1.0, the version before the field existed; the result is printed in that
		// version's format.
		c.CNIVersion = "0.1.0"
	}
	if c.Network, err = decodeString(top["name"], "name"); err != nil {
		return nil, err
	}
	if c.Network == "" {
		return nil, invalidConfig("name", "missing")
	}
	if err := c.parseIPAM(top["ipam"]); err != nil {
		return nil, err
	}
	if err := c.parseRequestedIPs(top); err != nil {
		return nil, err
	}
	if raw, ok := top["prevResult"]; ok && !isNull(raw) {
		c.PrevResult = raw
	}
	if err := c.parseAttachments(top); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) parseIPAM(raw json.RawMessage) *types.Error {
	if raw == nil || isNull(raw) {
		return invalidConfig("ipam", "missing: allot-cni is an IPAM plugin; configure it as the network's \"ipam\"")
	}
	ipam, err := decodeObject(raw, "ipam")
	if err != nil {
		return err
	}
	for _, k := range sortedKeys(ipam) {
		if !contains(ipamKeys, k) {
			return invalidConfig("ipam."+k, "unknown field (known: %s)", strings.Join(ipamKeys, ", "))
		}
	}
	if _, err := decodeString(ipam["type"], "ipam.type"); err != nil {
		return err
	}
	socket, err := decodeString(ipam["socket"], "ipam.socket")
	if err != nil {
		return err
	}
	if _, present := ipam["socket"]; present && !isNull(ipam["socket"]) {
		switch {
		case socket == "":
			return invalidConfig("ipam.socket", "must not be empty (leave it out for %s)", api.DefaultSocket)
		case !filepath.IsAbs(socket):
			return invalidConfig("ipam.socket", "must be an absolute path, got %q", socket)
		case strings.ContainsRune(socket, 0):
			return invalidConfig("ipam.socket", "must not contain NUL")
		}
		c.Socket = socket
	}
	timeout, err := decodeString(ipam["timeout"], "ipam.timeout")
	if err != nil {
		return err
	}
	if _, present := ipam["timeout"]; present && !isNull(ipam["timeout"]) {
		d, perr := time.ParseDuration(timeout)
		if perr != nil {
			return invalidConfig("ipam.timeout", "%q is not a duration (e.g. \"30s\")", timeout)
		}
		if d <= 0 {
			return invalidConfig("ipam.timeout", "must be positive, got %q", timeout)
		}
		c.Timeout = d
	}
	if c.Pools, err = decodePoolList(ipam["pools"], "ipam.pools"); err != nil {
		return err
	}
	if c.DefaultIPv4Pools, err = decodePoolList(ipam["default_ipv4_ippool"], "ipam.default_ipv4_ippool"); err != nil {
		return err
	}
	if c.DefaultIPv6Pools, err = decodePoolList(ipam["default_ipv6_ippool"], "ipam.default_ipv6_ippool"); err != nil {
		return err
	}
	return nil
}

// parseRequestedIPs reads runtimeConfig.ips and args.cni.ips. Other runtimeConfig
// capabilities and other args belong to other plugins and are left alone.
func (c *Config) parseRequestedIPs(top map[string]json.RawMessage) *types.Error {
	if raw, ok := top["runtimeConfig"]; ok && !isNull(raw) {
		rc, err := decodeObject(raw, "runtimeConfig")
		if err != nil {
			return err
		}
		if err := c.addIPs(rc["ips"], "runtimeConfig.ips"); err != nil {
			return err
		}
	}
	if raw, ok := top["args"]; ok && !isNull(raw) {
		args, err := decodeObject(raw, "args")
		if err != nil {
			return err
		}
		if rawCNI, ok := args["cni"]; ok && !isNull(rawCNI) {
			cni, err := decodeObject(rawCNI, "args.cni")
			if err != nil {
				return err
			}
			if err := c.addIPs(cni["ips"], "args.cni.ips"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Config) addIPs(raw json.RawMessage, field string) *types.Error {
	list, err := decodeStringList(raw, field)
	if err != nil {
		return err
	}
	for i, s := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		addr, ok := parseIPOrCIDR(s)
		if !ok {
			return invalidConfig(f, "%q is not an IP address or CIDR", s)
		}
		c.IPs = appendIP(c.IPs, RequestedIP{Value: s, Addr: addr, Field: f})
	}
	return nil
}

// MergeIPs adds the addresses requested through CNI_ARGS IP= after those of the config.
func (c *Config) MergeIPs(ips []RequestedIP) {
	for _, ip := range ips {
		c.IPs = appendIP(c.IPs, ip)
	}
}

// appendIP adds ip unless the same address is already requested: runtimes may pass an
// address both as a capability and as an arg, and asking for it twice would conflict.
func appendIP(list []RequestedIP, ip RequestedIP) []RequestedIP {
	for _, have := range list {
		if have.Addr == ip.Addr {
			return list
		}
	}
	return append(list, ip)
}

// parseAttachments reads cni.dev/valid-attachments, or the spec's earlier misspelling
// cni.dev/attachments that libcni also sends. cnitool sends neither: it asks to GC
// everything, and an absent list means exactly that.
func (c *Config) parseAttachments(top map[string]json.RawMessage) *types.Error {
	field := "cni.dev/valid-attachments"
	raw, ok := top[field]
	if !ok || isNull(raw) {
		field = "cni.dev/attachments"
		raw = top[field]
	}
	if raw == nil || isNull(raw) {
		return nil
	}
	items, err := decodeArray(raw, field)
	if err != nil {
		return err
	}
	for i, item := range items {
		f := fmt.Sprintf("%s[%d]", field, i)
		obj, err := decodeObject(item, f)
		if err != nil {
			return err
		}
		id, err := decodeString(obj["containerID"], f+".containerID")
		if err != nil {
			return err
		}
		ifName, err := decodeString(obj["ifname"], f+".ifname")
		if err != nil {
			return err
		}
		if id == "" {
			return invalidConfig(f+".containerID", "missing")
		}
		if ifName == "" {
			return invalidConfig(f+".ifname", "missing")
		}
		c.ValidAttachments = append(c.ValidAttachments, api.Owner{ContainerID: id, IfName: ifName})
	}
	sort.Slice(c.ValidAttachments, func(i, j int) bool {
		a, b := c.ValidAttachments[i], c.ValidAttachments[j]
		if a.ContainerID != b.ContainerID {
			return a.ContainerID < b.ContainerID
		}
		return a.IfName < b.IfName
	})
	return nil
}

// prevResultIPs returns the addresses of prevResult's "ips" (CHECK). Only the address is
// read: every result version that allows CHECK (0.4.0 and later) has the same shape there.
func prevResultIPs(raw json.RawMessage) ([]netip.Prefix, *types.Error) {
	obj, err := decodeObject(raw, "prevResult")
	if err != nil {
		return nil, err
	}
	items, err := decodeArray(obj["ips"], "prevResult.ips")
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(items))
	for i, item := range items {
		f := fmt.Sprintf("prevResult.ips[%d]", i)
		ipc, err := decodeObject(item, f)
		if err != nil {
			return nil, err
		}
		s, err := decodeString(ipc["address"], f+".address")
		if err != nil {
			return nil, err
		}
		p, perr := netip.ParsePrefix(s)
		if perr != nil {
			return nil, invalidConfig(f+".address", "%q is not an address with prefix length", s)
		}
		out = append(out, p)
	}
	return out, nil
}

// decodePoolList decodes a list of pool names: strings, non-empty, no duplicates.
func decodePoolList(raw json.RawMessage, field string) ([]string, *types.Error) {
	list, err := decodeStringList(raw, field)
	if err != nil {
		return nil, err
	}
	for i, name := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		if strings.TrimSpace(name) == "" {
			return nil, invalidConfig(f, "must be a non-empty string")
		}
		if name != strings.TrimSpace(name) {
			return nil, invalidConfig(f, "%q has leading or trailing spaces", name)
		}
		for j := range i {
			if list[j] == name {
				return nil, invalidConfig(f, "%q is already %s[%d]", name, field, j)
			}
		}
	}
	return list, nil
}

func parseIPOrCIDR(s string) (netip.Addr, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// The decode helpers below check JSON types one field at a time so that a wrong type is
// reported with the full path of the field (encoding/json's own errors lose array
// indices), and without reflection-heavy struct decoding on this exec-per-call path.

func decodeObject(raw json.RawMessage, field string) (map[string]json.RawMessage, *types.Error) {
	if k := jsonKind(raw); k != "object" {
		if k == "invalid" {
			return nil, decodeErr(field, "not valid JSON")
		}
		return nil, decodeErr(field, "expected an object, got %s", k)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, decodeErr(field, "not valid JSON: %v", err)
	}
	return m, nil
}

func decodeArray(raw json.RawMessage, field string) ([]json.RawMessage, *types.Error) {
	if raw == nil || isNull(raw) {
		return nil, nil
	}
	if k := jsonKind(raw); k != "array" {
		return nil, decodeErr(field, "expected an array, got %s", k)
	}
	var a []json.RawMessage
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, decodeErr(field, "%v", err)
	}
	return a, nil
}

// decodeString decodes an optional string; absent and null are "".
func decodeString(raw json.RawMessage, field string) (string, *types.Error) {
	if raw == nil || isNull(raw) {
		return "", nil
	}
	if k := jsonKind(raw); k != "string" {
		return "", decodeErr(field, "expected a string, got %s", k)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", decodeErr(field, "%v", err)
	}
	return s, nil
}

func decodeStringList(raw json.RawMessage, field string) ([]string, *types.Error) {
	items, err := decodeArray(raw, field)
	if err != nil || len(items) == 0 {
		return nil, err
	}
	out := make([]string, len(items))
	for i, item := range items {
		f := fmt.Sprintf("%s[%d]", field, i)
		if isNull(item) {
			return nil, decodeErr(f, "expected a string, got null")
		}
		if out[i], err = decodeString(item, f); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func jsonKind(raw json.RawMessage) string {
	b := bytes.TrimLeft(raw, " \t\r\n")
	if len(b) == 0 {
		return "invalid"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "number"
	}
	return "invalid"
}

func isNull(raw json.RawMessage) bool { return jsonKind(raw) == "null" }

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func decodeErr(field, format string, args ...any) *types.Error {
	return types.NewError(types.ErrDecodingFailure, field+": "+fmt.Sprintf(format, args...), "")
}

func invalidConfig(field, format string, args ...any) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, field+": "+fmt.Sprintf(format, args...), "")
}
