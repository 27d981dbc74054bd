package itest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Kustomized builds the kustomization in dir as README says, and returns
// its objects by "Kind namespace/name".
func Kustomized(ctx context.Context, t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out, _, err := RunKubectl(ctx, t, nil, "kustomize", "--load-restrictor=LoadRestrictionsNone", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	objs := map[string][]byte{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var head struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatal(err)
		}
		objs[head.Kind+" "+head.Metadata.Namespace+"/"+head.Metadata.Name] = doc
	}
	return objs
}

func DeploymentOf(t *testing.T, objs map[string][]byte, name string) *appsv1.Deployment {
	t.Helper()
	doc, ok := objs["Deployment ichor-system/"+name]
	if !ok {
		t.Fatalf("no Deployment %s", name)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(doc, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}
