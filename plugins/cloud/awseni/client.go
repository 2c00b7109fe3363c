package awseni

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"golang.org/x/time/rate"

	"github.com/allot-ipam/allot/sdk/cloud"
)

// EC2API is the part of *ec2.Client the backend uses (tests may wrap it).
type EC2API interface {
	DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeNetworkInterfaces(ctx context.Context, in *ec2.DescribeNetworkInterfacesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error)
	DescribeSubnets(ctx context.Context, in *ec2.DescribeSubnetsInput, optFns ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error)
	DescribeSecurityGroups(ctx context.Context, in *ec2.DescribeSecurityGroupsInput, optFns ...func(*ec2.Options)) (*ec2.DescribeSecurityGroupsOutput, error)
	DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
	CreateNetworkInterface(ctx context.Context, in *ec2.CreateNetworkInterfaceInput, optFns ...func(*ec2.Options)) (*ec2.CreateNetworkInterfaceOutput, error)
	AttachNetworkInterface(ctx context.Context, in *ec2.AttachNetworkInterfaceInput, optFns ...func(*ec2.Options)) (*ec2.AttachNetworkInterfaceOutput, error)
	DeleteNetworkInterface(ctx context.Context, in *ec2.DeleteNetworkInterfaceInput, optFns ...func(*ec2.Options)) (*ec2.DeleteNetworkInterfaceOutput, error)
	ModifyNetworkInterfaceAttribute(ctx context.Context, in *ec2.ModifyNetworkInterfaceAttributeInput, optFns ...func(*ec2.Options)) (*ec2.ModifyNetworkInterfaceAttributeOutput, error)
	AssignPrivateIpAddresses(ctx context.Context, in *ec2.AssignPrivateIpAddressesInput, optFns ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error)
	UnassignPrivateIpAddresses(ctx context.Context, in *ec2.UnassignPrivateIpAddressesInput, optFns ...func(*ec2.Options)) (*ec2.UnassignPrivateIpAddressesOutput, error)
	AssignIpv6Addresses(ctx context.Context, in *ec2.AssignIpv6AddressesInput, optFns ...func(*ec2.Options)) (*ec2.AssignIpv6AddressesOutput, error)
	UnassignIpv6Addresses(ctx context.Context, in *ec2.UnassignIpv6AddressesInput, optFns ...func(*ec2.Options)) (*ec2.UnassignIpv6AddressesOutput, error)
}

var _ EC2API = (*ec2.Client)(nil)

// ClientOptions returns the ec2.Options adjustments the backend applies to every client it
// builds: a client-side token bucket (qps, burst) in front of every attempt, the standard
// retryer with up to maxAttempts attempts and exponential backoff with jitter capped at
// maxBackoff on throttling and 5xx answers, and no retry quota (ratelimit.None): under
// sustained throttling the SDK's quota would otherwise make calls fail at once instead of
// backing off. m, if not nil, counts every attempt by action and outcome.
func ClientOptions(qps float64, burst, maxAttempts int, maxBackoff time.Duration, m *Metrics) func(*ec2.Options) {
	var lim *rate.Limiter
	if qps > 0 {
		lim = rate.NewLimiter(rate.Limit(qps), max(burst, 1))
	}
	return func(o *ec2.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = maxAttempts
			so.MaxBackoff = maxBackoff
			so.RateLimiter = ratelimit.None
		})
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			// After the retry middleware: runs once per attempt.
			return stack.Finalize.Add(attemptMiddleware(lim, m), middleware.After)
		})
	}
}

func attemptMiddleware(lim *rate.Limiter, m *Metrics) middleware.FinalizeMiddleware {
	return middleware.FinalizeMiddlewareFunc("allotAttempt", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		if lim != nil {
			if err := lim.Wait(ctx); err != nil {
				return middleware.FinalizeOutput{}, middleware.Metadata{}, fmt.Errorf("client rate limit: %w", err)
			}
		}
		start := time.Now()
		out, md, err := next.HandleFinalize(ctx, in)
		m.observeCall(middleware.GetOperationName(ctx), err, time.Since(start))
		return out, md, err
	})
}

// NewClient builds an ec2.Client from the default AWS configuration chain (environment,
// shared files, IMDS) with region and, if set, endpoint (BaseEndpoint) overriding it.
func NewClient(ctx context.Context, cfg Config, m *Metrics) (*ec2.Client, error) {
	awsCfg, err := loadAWSConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return ec2.NewFromConfig(awsCfg, func(o *ec2.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	}, ClientOptions(cfg.QPS, cfg.Burst, cfg.MaxAttempts, cfg.MaxBackoff.Duration, m)), nil
}

// throttleCodes are EC2's throttling error codes.
var throttleCodes = map[string]bool{"RequestLimitExceeded": true, "Throttling": true, "ThrottlingException": true, "EC2ThrottledException": true}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// mapErr wraps EC2 errors in the cloud sentinels the operator reacts to.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	code := errorCode(err)
	switch {
	case throttleCodes[code]:
		return fmt.Errorf("%w: %w", cloud.ErrThrottled, err)
	case code == "PrivateIpAddressLimitExceeded", code == "AttachmentLimitExceeded":
		return fmt.Errorf("%w: %w", cloud.ErrLimitReached, err)
	case code == "InsufficientFreeAddressesInSubnet":
		return fmt.Errorf("%w: %w", cloud.ErrSubnetFull, err)
	case code == "InsufficientCidrBlocks":
		return fmt.Errorf("%w: %w", cloud.ErrNoFreePrefix, err)
	case code == "InvalidInstanceID.NotFound":
		return fmt.Errorf("%w: %w", cloud.ErrNodeNotFound, err)
	}
	// 5xx answers that outlived the retries are "try later" too.
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
		return fmt.Errorf("%w: %w", cloud.ErrThrottled, err)
	}
	return err
}
