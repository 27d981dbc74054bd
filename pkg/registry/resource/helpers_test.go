package resource_test

import (
	"context"

	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

func withUser(ctx context.Context, name string, groups ...string) context.Context {
	return genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: name, Groups: groups})
}

func fieldpathVersion(v string) fieldpath.APIVersion { return fieldpath.APIVersion(v) }

func pathOf(name string) fieldpath.Path { return fieldpath.MakePathOrDie(name) }
