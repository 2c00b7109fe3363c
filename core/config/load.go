package config

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/providers/structs"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
)

// EnvPrefix is the prefix of environment overrides: ALLOT_STORE_PATH sets store.path.
const EnvPrefix = "ALLOT_"

// flagKeys maps command-line flags to configuration keys.
var flagKeys = map[string]string{
	"socket":          "socket",
	"socket-group":    "socketGroup",
	"store-path":      "store.path",
	"http-address":    "http.address",
	"metrics-address": "http.metricsAddress",
	"log-level":       "log.level",
	"log-format":      "log.format",
}

// envKeys maps the environment variables we accept (after the prefix) to keys. An explicit
// table, rather than a generic "_ becomes ." rule, because keys are camelCase and a typo
// in a variable name should be reported, not silently ignored.
var envKeys = map[string]string{
	"MODE":                 "mode",
	"SOCKET":               "socket",
	"SOCKET_GROUP":         "socketGroup",
	"STORE_PATH":           "store.path",
	"STORE_NOSYNC":         "store.noSync",
	"STORE_ON_CORRUPTION":  "store.onCorruption",
	"HTTP_ADDRESS":         "http.address",
	"HTTP_METRICS_ADDRESS": "http.metricsAddress",
	"LOG_LEVEL":            "log.level",
	"LOG_FORMAT":           "log.format",
}

// otherEnv are ALLOT_* variables read by other parts (allotd's --config, the test harness
// and scripts); they are not settings but are not typos either.
var otherEnv = map[string]bool{"CONFIG": true, "CACHE": true, "CNI_BIN_DIR": true, "CNITOOL": true}

// RegisterFlags adds the flags that override configuration keys to fs.
func RegisterFlags(fs *pflag.FlagSet) {
	d := Defaults()
	fs.String("socket", d.Socket, "unix socket of the local API")
	fs.String("socket-group", d.SocketGroup, "group (name or gid) whose members may use the local API besides root")
	fs.String("store-path", d.Store.Path, "path of the embedded store file")
	fs.String("http-address", d.HTTP.Address, "address of /healthz, /readyz and /metrics (empty disables)")
	fs.String("metrics-address", d.HTTP.MetricsAddress, "address of /metrics alone, any interface (empty disables)")
	fs.String("log-level", d.Log.Level, "log level: debug, info, warn, error")
	fs.String("log-format", d.Log.Format, "log format: text or json")
}

// Load reads the file at path (if path is not empty), then the environment, then the flags
// of fs that were set (fs may be nil), and validates the result.
func Load(path string, fs *pflag.FlagSet) (*Config, error) {
	return load(path, os.Environ(), fs)
}

func load(path string, environ []string, fs *pflag.FlagSet) (*Config, error) {
	k := koanf.New(".")
	unknownEnv, err := loadSources(k, path, environ, fs)
	if err != nil {
		return nil, err
	}
	c, err := decode(k, path)
	if err != nil {
		return nil, err
	}
	if c.Datapath.Type == "" {
		c.Datapath.Type = DefaultDatapathType(c)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config: %s: %w", describe(path), err)
	}
	sort.Strings(unknownEnv)
	for _, k := range unknownEnv {
		c.Warnings = append(c.Warnings, fmt.Sprintf("environment variable %s is not a setting and is ignored (settings: %s)", k, knownEnv()))
	}
	return c, nil
}

// loadSources layers the defaults, the file, the environment and the set flags into k, in
// that order of precedence, and returns the ALLOT_* variables that are no setting.
func loadSources(k *koanf.Koanf, path string, environ []string, fs *pflag.FlagSet) ([]string, error) {
	if err := k.Load(structs.Provider(Defaults(), "koanf"), nil); err != nil {
		return nil, fmt.Errorf("config: defaults: %w", err)
	}
	// datapath.type's default depends on the mode (DefaultDatapathType): unset it, so that
	// after loading an empty value means "not set by any source".
	k.Delete("datapath.type")
	if path != "" {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("config: read %s: %w", path, err)
		}
	}
	var unknownEnv []string
	envProvider := env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(k, v string) (string, any) {
			key, unknown := envKey(k)
			if unknown {
				unknownEnv = append(unknownEnv, k)
			}
			if key == "" {
				return "", nil
			}
			return key, v
		},
	})
	if err := k.Load(envProvider, nil); err != nil {
		return nil, fmt.Errorf("config: environment: %w", err)
	}
	if fs != nil {
		flags := posflag.ProviderWithFlag(fs, ".", k, func(f *pflag.Flag) (string, any) {
			key, ok := flagKeys[f.Name]
			if !ok || !f.Changed {
				return "", nil
			}
			return key, posflag.FlagVal(fs, f)
		})
		if err := k.Load(flags, nil); err != nil {
			return nil, fmt.Errorf("config: flags: %w", err)
		}
	}
	return unknownEnv, nil
}

// envKey maps an ALLOT_* variable to its configuration key ("" when it is none) and tells
// whether it is unknown: neither a setting nor read by another part.
func envKey(variable string) (key string, unknown bool) {
	name := strings.TrimPrefix(variable, EnvPrefix)
	if key, ok := envKeys[name]; ok {
		return key, false
	}
	return "", !otherEnv[name]
}

// decode turns the layered keys into a Config; a key no field takes is an error.
func decode(k *koanf.Koanf, path string) (*Config, error) {
	var c Config
	err := k.UnmarshalWithConf("", &c, koanf.UnmarshalConf{
		Tag: "koanf",
		DecoderConfig: &mapstructure.DecoderConfig{
			DecodeHook: mapstructure.ComposeDecodeHookFunc(
				mapstructure.StringToTimeDurationHookFunc(),
				mapstructure.StringToSliceHookFunc(","),
			),
			ErrorUnused:      true,
			WeaklyTypedInput: true,
			Result:           &c,
			TagName:          "koanf",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", describe(path), err)
	}
	return &c, nil
}

func describe(path string) string {
	if path == "" {
		return "(no file)"
	}
	return path
}

func knownEnv() string {
	names := make([]string, 0, len(envKeys))
	for k := range envKeys {
		names = append(names, EnvPrefix+k)
	}
	sortStrings(names)
	return strings.Join(names, ", ")
}
