package itest

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// ArtifactObjects are the objects of artifacts/<sub> by "Kind namespace/name".
func ArtifactObjects(t *testing.T, sub string) map[string][]byte {
	t.Helper()
	_, _, docs := ReadArtifactsIn(t, sub)
	objs := map[string][]byte{}
	for _, d := range docs {
		objs[d.Meta.Kind+" "+d.Ns+"/"+d.Name] = d.Data
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
