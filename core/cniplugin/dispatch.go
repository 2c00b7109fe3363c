package cniplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/containernetworking/cni/pkg/types"
)

// SupportedVersions are the CNI versions allot-cni speaks (the library's version.All); GC
// and STATUS need 1.1.0, and other versions are refused with code 1.
var SupportedVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// CmdArgs is one call's CNI environment and stdin (the fields of skel.CmdArgs).
type CmdArgs struct {
	ContainerID   string
	Netns         string
	IfName        string
	Args          string
	Path          string
	NetnsOverride string
	StdinData     []byte
}

// Main is allot-cni's main: the CNI protocol as the library's skel.PluginMainFuncs speaks
// it (environment, version checks, VERSION, error JSON on stdout and exit status 1),
// written here so the binary links neither skel nor what skel brings (the version
// package, a regexp compiled at start-up, netlink's netns): about 0.2 ms less start-up on
// every exec (test/cnibench). TestSkelMain checks it against the protocol, and
// TestMainMatchesSkel against skel itself.
func (p *Plugin) Main(about string) {
	if e := p.dispatch(os.Getenv, os.Stdin, os.Stdout, os.Stderr, about); e != nil {
		_ = e.Print()
		os.Exit(1)
	}
}

// dispatch runs the command of the environment.
func (p *Plugin) dispatch(getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer, about string) *types.Error {
	cmd, args, err := readCmdArgs(getenv, stdin)
	if err != nil {
		if err.Code == types.ErrInvalidEnvironmentVariables && getenv("CNI_COMMAND") == "" && about != "" {
			fmt.Fprintln(stderr, about)
			fmt.Fprintf(stderr, "CNI protocol versions supported: %s\n", strings.Join(SupportedVersions, ", "))
			return nil
		}
		return err
	}
	switch cmd {
	case "ADD", "DEL":
		f := p.Add
		if cmd == "DEL" {
			f = p.Del
		}
		if err := checkVersionAndCall(args, f); err != nil {
			return err
		}
		return checkNetNS(args)
	case "CHECK":
		return checkMinVersionAndCall(args, "0.4.0", "CHECK", p.Check)
	case "GC":
		return checkMinVersionAndCall(args, "1.1.0", "GC", p.GC)
	case "STATUS":
		return checkMinVersionAndCall(args, "1.1.0", "STATUS", p.Status)
	case "VERSION":
		b, _ := json.Marshal(struct {
			CNIVersion        string   `json:"cniVersion"`
			SupportedVersions []string `json:"supportedVersions,omitempty"`
		}{SupportedVersions[len(SupportedVersions)-1], SupportedVersions})
		if _, err := stdout.Write(append(b, '\n')); err != nil {
			return types.NewError(types.ErrIOFailure, err.Error(), "")
		}
		return nil
	}
	return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("unknown CNI_COMMAND: %v", cmd), "")
}

// envVars are the CNI variables and the commands that require them.
var envVars = []struct {
	name     string
	required []string
	validate func(string) *types.Error
}{
	{"CNI_COMMAND", nil, nil},
	{"CNI_CONTAINERID", []string{"ADD", "CHECK", "DEL"}, validateContainerID},
	{"CNI_NETNS", []string{"ADD", "CHECK"}, nil},
	{"CNI_IFNAME", []string{"ADD", "CHECK", "DEL"}, validateIfName},
	{"CNI_ARGS", nil, nil},
	{"CNI_PATH", []string{"ADD", "CHECK", "DEL", "GC", "STATUS"}, nil},
	{"CNI_NETNS_OVERRIDE", nil, nil},
}

// readCmdArgs reads the environment and stdin, with skel's checks and messages.
func readCmdArgs(getenv func(string) string, stdin io.Reader) (string, *CmdArgs, *types.Error) {
	cmd := getenv("CNI_COMMAND")
	vals := make([]string, len(envVars))
	var missing []string
	for i, v := range envVars {
		vals[i] = getenv(v.name)
		required := v.name == "CNI_COMMAND" || slices.Contains(v.required, cmd)
		switch {
		case vals[i] == "" && required:
			missing = append(missing, v.name)
		case vals[i] != "" && required && v.validate != nil:
			if err := v.validate(vals[i]); err != nil {
				return "", nil, err
			}
		}
	}
	if len(missing) > 0 {
		return "", nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("required env variables [%s] missing", strings.Join(missing, ",")), "")
	}
	args := &CmdArgs{ContainerID: vals[1], Netns: vals[2], IfName: vals[3], Args: vals[4], Path: vals[5], NetnsOverride: vals[6]}
	if cmd == "VERSION" {
		return cmd, args, nil
	}
	b, err := io.ReadAll(stdin)
	if err != nil {
		return "", nil, types.NewError(types.ErrIOFailure, fmt.Sprintf("error reading from stdin: %v", err), "")
	}
	args.StdinData = b
	var conf struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		return "", nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("error unmarshall network config: %v", err), "")
	}
	if conf.Name == "" {
		return "", nil, types.NewError(types.ErrInvalidNetworkConfig, "missing network name", "")
	}
	if !validName(conf.Name) {
		return "", nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid characters found in network name", conf.Name)
	}
	return cmd, args, nil
}

// configVersion is the configuration's cniVersion; none is 0.1.0.
func configVersion(stdin []byte) (string, *types.Error) {
	var conf struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return "", types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding version from network config: %v", err), "")
	}
	if conf.CNIVersion == "" {
		return "0.1.0", nil
	}
	return conf.CNIVersion, nil
}

// checkVersionAndCall refuses a configuration version allot-cni does not speak, then calls f.
func checkVersionAndCall(args *CmdArgs, f func(*CmdArgs) error) *types.Error {
	v, terr := configVersion(args.StdinData)
	if terr != nil {
		return terr
	}
	if !slices.Contains(SupportedVersions, v) {
		return types.NewError(types.ErrIncompatibleCNIVersion, "incompatible CNI versions", fmt.Sprintf("config is %q, plugin supports %q", v, SupportedVersions))
	}
	if err := f(args); err != nil {
		var e *types.Error
		if errors.As(err, &e) {
			return e
		}
		return types.NewError(types.ErrInternal, err.Error(), "")
	}
	return nil
}

// checkMinVersionAndCall is checkVersionAndCall for commands that appeared in version min.
func checkMinVersionAndCall(args *CmdArgs, min, cmd string, f func(*CmdArgs) error) *types.Error {
	v, terr := configVersion(args.StdinData)
	if terr != nil {
		return terr
	}
	ok, err := versionAtLeast(v, min)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, err.Error(), "")
	}
	if !ok {
		return types.NewError(types.ErrIncompatibleCNIVersion, "config version does not allow "+cmd, "")
	}
	if ok, err := versionAtLeast(SupportedVersions[len(SupportedVersions)-1], v); err != nil || !ok {
		return types.NewError(types.ErrIncompatibleCNIVersion, "plugin version does not allow "+cmd, "")
	}
	return checkVersionAndCall(args, f)
}

// versionAtLeast reports whether version v >= w ("major.minor.micro", missing parts 0).
func versionAtLeast(v, w string) (bool, error) {
	a, err := parseVersion(v)
	if err != nil {
		return false, err
	}
	b, err := parseVersion(w)
	if err != nil {
		return false, err
	}
	return slices.Compare(a[:], b[:]) >= 0, nil
}

func parseVersion(v string) ([3]int, error) {
	var out [3]int
	parts := strings.Split(v, ".")
	if len(parts) >= 4 {
		return out, fmt.Errorf("invalid version %q: too many parts", v)
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return out, fmt.Errorf("failed to convert %s version part %q: %w", []string{"major", "minor", "micro"}[i], p, err)
		}
		out[i] = n
	}
	return out, nil
}

// checkNetNS refuses a CNI_NETNS that is the plugin's own network namespace (unless
// CNI_NETNS_OVERRIDE), as skel does after ADD and DEL; a path that does not exist is
// not an error (DEL of a namespace already gone).
func checkNetNS(args *CmdArgs) *types.Error {
	if o := args.NetnsOverride; strings.EqualFold(o, "TRUE") || o == "1" {
		return nil
	}
	var target, own syscall.Stat_t
	if err := syscall.Stat(args.Netns, &target); err != nil {
		return nil
	}
	if err := syscall.Stat("/proc/self/ns/net", &own); err != nil {
		return types.NewError(types.ErrInvalidNetNS, "get plugin's netns failed", "")
	}
	if target.Dev == own.Dev && target.Ino == own.Ino {
		return types.NewError(types.ErrInvalidNetNS, "plugin's netns and netns from CNI_NETNS should not be the same", "")
	}
	return nil
}

// validName is the CNI rule for container IDs and network names: [a-zA-Z0-9][a-zA-Z0-9_.-]*.
func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return s != ""
}

func validateContainerID(id string) *types.Error {
	if !validName(id) {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "invalid characters in containerID", id)
	}
	return nil
}

func validateIfName(name string) *types.Error {
	const maxLen = 15 // IFNAMSIZ less the NUL
	switch {
	case len(name) > maxLen:
		return types.NewError(types.ErrInvalidEnvironmentVariables, "interface name is too long", fmt.Sprintf("interface name should be less than %d characters", maxLen+1))
	case name == "." || name == "..":
		return types.NewError(types.ErrInvalidEnvironmentVariables, "interface name is . or ..", "")
	case strings.ContainsFunc(name, func(r rune) bool { return r == '/' || r == ':' || unicode.IsSpace(r) }):
		return types.NewError(types.ErrInvalidEnvironmentVariables, "interface name contains / or : or whitespace characters", "")
	}
	return nil
}
