// Package ec2fake is an EC2 Query-protocol fake: an http.Handler that the real
// aws-sdk-go-v2 ec2.Client talks to through BaseEndpoint (served on 127.0.0.1 by httptest).
//
// It keeps state for VPCs, subnets (CIDR, free addresses with AWS's five reserved ones, AZ,
// tags), security groups, instances (type, AZ, primary ENI eth0) and ENIs (addresses, device
// index, attachment, description, tags, delete-on-termination); it enforces per-instance-type
// ENI and per-ENI address limits and answers with EC2's real error codes
// (InsufficientFreeAddressesInSubnet, PrivateIpAddressLimitExceeded, AttachmentLimitExceeded,
// InvalidNetworkInterfaceID.NotFound, InvalidParameterValue for a taken device index,
// RequestLimitExceeded with HTTP 503, ...).
//
// Test controls: per-action token buckets sized like AWS's (mutating 100 / 5 per second,
// Describe 100 / 20 per second) with a TimeScale to run them faster, injected latency,
// scripted faults (FailNext, FailNextAfterApply), random faults (SetRandomFault), per-action
// counters (Stats), pagination (MaxResults / NextToken) and the filters allot's AWS backend
// uses. Actions lists the supported actions; an unknown action answers InvalidAction and an
// unknown filter InvalidParameterValue, so a client that drifts from the fake fails loudly.
//
// The wire format was checked against aws-sdk-go-v2 v1.47.7 / service/ec2 v1.344.1: requests
// are form-encoded POSTs with flattened names (Filter.1.Name, Filter.1.Value.1,
// SecurityGroupId.1, PrivateIpAddress.1, TagSpecification.1.Tag.1.Key); answers are
// <ActionResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"> with ...Set/item lists
// and nextToken; errors are <Response><Errors><Error><Code/><Message/></Error></Errors>.
//
// Server.IMDS is the instance metadata service of one of its instances (IMDSv2 only: token,
// then meta-data/mac and instance-id), for the SDK's feature/ec2/imds client (StartIMDS).
package ec2fake
