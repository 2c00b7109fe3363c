package ec2fake

import (
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// Start serves s on 127.0.0.1 until the test ends and returns the base URL.
func Start(t testing.TB, s *Server) string {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts.URL
}

// NewClient returns a real ec2.Client pointed at endpoint (a fake's base URL) with anonymous
// credentials and region us-east-1. optFns may adjust the options (retryer, middleware).
func NewClient(endpoint string, optFns ...func(*ec2.Options)) *ec2.Client {
	return ec2.New(ec2.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  aws.AnonymousCredentials{},
	}, optFns...)
}
