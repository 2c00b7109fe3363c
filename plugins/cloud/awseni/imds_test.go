package awseni_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	awseni "github.com/allot-ipam/allot/plugins/cloud/awseni"
	"github.com/allot-ipam/allot/test/ec2fake"
)

// TestPrimaryMAC: the SDK's IMDS client, as the backend configures it, reads the instance's
// primary MAC from the fake IMDS over HTTP with an IMDSv2 token; a service that does not
// answer is ErrIMDSUnreachable, one that answers with an error is not.
func TestPrimaryMAC(t *testing.T) {
	fake, inst := ec2fake.NewInstance(t)
	m := fake.IMDS(inst)
	c, err := awseni.NewIMDSClient(t.Context(), awseni.Config{}, ec2fake.StartIMDS(t, m))
	if err != nil {
		t.Fatal(err)
	}
	mac, err := awseni.PrimaryMAC(t.Context(), c)
	if want := fake.InstanceENIs(inst)[0].MAC; err != nil || mac.String() != want {
		t.Fatalf("primary MAC %s %v, want %s", mac, err, want)
	}
	if m.Calls("PUT /latest/api/token") != 1 || m.Calls("GET mac") != 1 {
		t.Fatalf("IMDS calls: token %d, mac %d; want one of each (IMDSv2)", m.Calls("PUT /latest/api/token"), m.Calls("GET mac"))
	}

	unknown := fake.IMDS("i-gone")
	c, _ = awseni.NewIMDSClient(t.Context(), awseni.Config{}, ec2fake.StartIMDS(t, unknown))
	if _, err := awseni.PrimaryMAC(t.Context(), c); err == nil || errors.Is(err, awseni.ErrIMDSUnreachable) || !strings.Contains(err.Error(), "aws-eni: IMDS meta-data/mac: ") {
		t.Fatalf("IMDS answering 404: %v", err)
	}

	closed := httptest.NewServer(nil)
	closed.Close()
	c, _ = awseni.NewIMDSClient(t.Context(), awseni.Config{}, closed.URL)
	if _, err := awseni.PrimaryMAC(t.Context(), c); !errors.Is(err, awseni.ErrIMDSUnreachable) {
		t.Fatalf("IMDS not listening: %v, want ErrIMDSUnreachable", err)
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	c, _ = awseni.NewIMDSClient(t.Context(), awseni.Config{}, "")
	if _, err := awseni.PrimaryMAC(t.Context(), c); !errors.Is(err, awseni.ErrIMDSUnreachable) {
		t.Fatalf("IMDS disabled: %v, want ErrIMDSUnreachable", err)
	}
}
