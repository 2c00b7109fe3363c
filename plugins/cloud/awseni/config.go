package awseni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// Config is the backend's configuration block (keys as in the allotd config file).
type Config struct {
	// Region of the EC2 API; empty: from the environment / IMDS.
	Region string `json:"region"`
	// Endpoint overrides the EC2 endpoint (BaseEndpoint): VPC endpoints, tests.
	Endpoint string `json:"endpoint"`
	// VPCID limits the resync to one VPC; empty: every instance the account can see.
	VPCID string `json:"vpc-id"`
	// QPS and Burst bound the client's request rate (defaults 4 and 20, as Cilium).
	QPS   float64 `json:"qps"`
	Burst int     `json:"burst"`
	// MaxAttempts per call (retries on throttling and 5xx), default 10.
	MaxAttempts int `json:"max-attempts"`
	// MaxBackoff caps the exponential backoff between attempts, default 20s.
	MaxBackoff Duration `json:"max-backoff"`
	// InstanceLimits overrides the built-in limits per instance type, value
	// "enis,addrsPerEni,ipv6PerEni" (Cilium's --aws-instance-limit-mapping).
	InstanceLimits map[string]string `json:"instance-limit-mapping"`
	// UpdateLimitsViaAPI reads every type's limits with DescribeInstanceTypes at first use
	// (Cilium's --update-ec2-adapter-limit-via-api).
	UpdateLimitsViaAPI bool `json:"update-limits-via-api"`
	// SecurityGroupTags select the security groups of new ENIs when the operator names none
	// (spec.eni.security-group-tags); with neither, new ENIs get eth0's groups.
	SecurityGroupTags map[string]string `json:"security-group-tags"`
	// ResyncInterval is how often the whole inventory (instances, ENIs, subnets) is read
	// again; between resyncs the backend answers from its cache, kept current by its own
	// writes. Default 1m.
	ResyncInterval Duration `json:"resync-interval"`
}

// Duration is a time.Duration written as "20s" in configuration.
type Duration struct{ time.Duration }

// UnmarshalJSON accepts a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string like \"20s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{QPS: 4, Burst: 20, MaxAttempts: 10, MaxBackoff: Duration{20 * time.Second}, ResyncInterval: Duration{time.Minute}}
}

// Validate checks cfg; errors name the field.
func (c Config) Validate() error {
	var errs []error
	if c.QPS < 0 {
		errs = append(errs, fmt.Errorf("qps: %v is negative", c.QPS))
	}
	if c.QPS > 0 && c.Burst < 1 {
		errs = append(errs, fmt.Errorf("burst: %d must be at least 1", c.Burst))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("max-attempts: %d must be at least 1", c.MaxAttempts))
	}
	if c.MaxBackoff.Duration < 0 {
		errs = append(errs, fmt.Errorf("max-backoff: %s is negative", c.MaxBackoff.Duration))
	}
	if c.ResyncInterval.Duration <= 0 {
		errs = append(errs, fmt.Errorf("resync-interval: %s must be positive", c.ResyncInterval.Duration))
	}
	if _, err := c.limitMapping(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Config) limitMapping() (map[string]cloud.Limits, error) {
	out := map[string]cloud.Limits{}
	for _, t := range sortedKeys(c.InstanceLimits) {
		l, err := parseLimits(c.InstanceLimits[t])
		if err != nil {
			return nil, fmt.Errorf("instance-limit-mapping.%s: %w", t, err)
		}
		out[t] = l
	}
	return out, nil
}

// ParseConfig reads the backend's block of the allotd configuration over the defaults;
// unknown keys are errors.
func ParseConfig(m map[string]any) (Config, error) {
	cfg := DefaultConfig()
	if len(m) > 0 {
		raw, err := json.Marshal(m)
		if err != nil {
			return Config{}, fmt.Errorf("aws-eni: config: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return Config{}, fmt.Errorf("aws-eni: config: %w", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("aws-eni: config: %w", err)
	}
	return cfg, nil
}

func loadAWSConfig(ctx context.Context, cfg Config) (aws.Config, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("aws-eni: loading AWS configuration: %w", err)
	}
	return awsCfg, nil
}
