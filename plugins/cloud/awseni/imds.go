package awseni

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// ErrIMDSUnreachable wraps an IMDS error without an HTTP answer: not on EC2, IMDS turned off
// (the instance's HttpEndpoint, or AWS_EC2_METADATA_DISABLED), or a hop limit the answer
// does not survive.
var ErrIMDSUnreachable = errors.New("aws-eni: instance metadata service unreachable")

// NewIMDSClient is the SDK's IMDS client, configured by the same AWS configuration chain as
// the EC2 client (NewClient): the environment (AWS_EC2_METADATA_SERVICE_ENDPOINT,
// AWS_EC2_METADATA_DISABLED) and shared files; endpoint, if set, overrides the address.
func NewIMDSClient(ctx context.Context, cfg Config, endpoint string) (*imds.Client, error) {
	awsCfg, err := loadAWSConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return imds.NewFromConfig(awsCfg, func(o *imds.Options) {
		if endpoint != "" {
			o.Endpoint = endpoint
		}
	}), nil
}

// PrimaryMAC is the instance's primary MAC, latest/meta-data/mac: that of the ENI at device
// index 0, which the AWS VPC CNI looks for among the node's links to find the primary ENI.
// The client reads it with an IMDSv2 session token. An error without an HTTP answer wraps
// ErrIMDSUnreachable.
func PrimaryMAC(ctx context.Context, c *imds.Client) (net.HardwareAddr, error) {
	out, err := c.GetMetadata(ctx, &imds.GetMetadataInput{Path: "mac"})
	if err != nil {
		var answered interface{ HTTPStatusCode() int }
		if ctx.Err() != nil || errors.As(err, &answered) {
			return nil, fmt.Errorf("aws-eni: IMDS meta-data/mac: %w", err)
		}
		return nil, fmt.Errorf("%w: meta-data/mac: %w", ErrIMDSUnreachable, err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 64))
	if err != nil {
		return nil, fmt.Errorf("aws-eni: IMDS meta-data/mac: %w", err)
	}
	mac, err := net.ParseMAC(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("aws-eni: IMDS meta-data/mac: %w", err)
	}
	return mac, nil
}
