package awseni

import (
	"context"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/allot-ipam/allot/core/eni"
)

var _ eni.InterfaceCollector = (*Backend)(nil)

// DetachedInterfaces implements eni.InterfaceCollector: DescribeNetworkInterfaces with
// status=available and one filter per tag (and the configured VPC), paged.
func (b *Backend) DetachedInterfaces(ctx context.Context, tags map[string]string) ([]string, error) {
	if len(tags) == 0 {
		return nil, fmt.Errorf("aws-eni: detached interfaces: no tags")
	}
	filters := []types.Filter{{Name: aws.String("status"), Values: []string{"available"}}}
	if b.cfg.VPCID != "" {
		filters = append(filters, types.Filter{Name: aws.String("vpc-id"), Values: []string{b.cfg.VPCID}})
	}
	for _, k := range sortedKeys(tags) {
		filters = append(filters, types.Filter{Name: aws.String("tag:" + k), Values: []string{tags[k]}})
	}
	var out []string
	p := ec2.NewDescribeNetworkInterfacesPaginator(b.api, &ec2.DescribeNetworkInterfacesInput{Filters: filters, MaxResults: aws.Int32(1000)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("aws-eni: detached interfaces: %w", mapErr(err))
		}
		for _, ni := range page.NetworkInterfaces {
			// The filter is the API's; the check is ours: never an attached interface.
			if ni.Attachment == nil && ni.Status == types.NetworkInterfaceStatusAvailable {
				out = append(out, aws.ToString(ni.NetworkInterfaceId))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// DeleteInterface implements eni.InterfaceCollector with DeleteNetworkInterface; an
// interface already gone is not an error.
func (b *Backend) DeleteInterface(ctx context.Context, id string) error {
	_, err := b.api.DeleteNetworkInterface(ctx, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(id)})
	if err != nil && errorCode(err) != "InvalidNetworkInterfaceID.NotFound" {
		return fmt.Errorf("aws-eni: delete %s: %w", id, mapErr(err))
	}
	return nil
}
