// Command models-schema prints the OpenAPI v2 definitions of Ichor's types,
// which the apply-configuration generator reads to learn list and map types.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"ichor.dev/ichor/pkg/generated/openapi"
)

func main() {
	if err := printSchema(); err != nil {
		fmt.Fprintf(os.Stderr, "models-schema: %v\n", err)
		os.Exit(1)
	}
}

func printSchema() error {
	ref := func(name string) spec.Ref { return spec.MustCreateRef("#/definitions/" + name) }
	defs := openapi.GetOpenAPIDefinitions(ref)
	schemas := make(map[string]spec.Schema, len(defs))
	for name, def := range defs {
		schemas[name] = def.Schema
		// Prefer an embedded v2 schema, so the output is always OpenAPI v2.
		if v2, ok := def.Schema.Extensions[common.ExtensionV2Schema].(spec.Schema); ok {
			schemas[name] = v2
		}
	}
	out, err := json.Marshal(&spec.Swagger{SwaggerProps: spec.SwaggerProps{
		Swagger:     "2.0",
		Definitions: schemas,
		Info:        &spec.Info{InfoProps: spec.InfoProps{Title: "Ichor", Version: "v1alpha1"}},
	}})
	if err != nil {
		return fmt.Errorf("encode definitions: %w", err)
	}
	_, err = os.Stdout.Write(out)
	return err
}
