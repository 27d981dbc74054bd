package secretsbundle

import (
	"strings"
	"testing"
	"time"
)

func TestGenerateThenParse(t *testing.T) {
	data, err := Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(data)
	if err != nil {
		t.Fatalf("parse a generated bundle: %v", err)
	}
	if b.Certs == nil || b.Certs.OS == nil || len(b.Certs.OS.Key) == 0 || b.Secrets.BootstrapToken == "" {
		t.Fatalf("generated bundle lacks the Talos CA or a bootstrap token")
	}
	// Two bundles never share a CA.
	other, err := Generate("v1.13.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if string(other) == string(data) {
		t.Fatal("two generated bundles are equal")
	}
}

func TestGenerateRefusesBadVersion(t *testing.T) {
	if _, err := Generate("latest", time.Now()); err == nil {
		t.Fatal("generated a bundle for version \"latest\"")
	}
}

func TestParseErrorsDoNotQuoteTheData(t *testing.T) {
	const secret = "s3cr3t-key-material"
	for name, data := range map[string]string{
		"not yaml":   "certs: [" + secret,
		"wrong type": "cluster: " + secret + "\n",
		"incomplete": "cluster:\n  id: " + secret + "\n",
		"empty":      "",
	} {
		_, err := Parse([]byte(data))
		if err == nil {
			t.Errorf("%s: parsed", name)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error quotes the data: %v", name, err)
		}
	}
}
