// Command pulumi-resource-kubernetes is Pulumi's Kubernetes provider, built from Go modules by scripts/setup.sh
// for the kubernetes tenant stacks (docs/kubernetes.md, "Pulumi's Kubernetes provider here").
//
// The provider's own command (github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes)
// embeds schema-embed.json and terraform-mapping-embed.json, which its generate.go writes from schema.json and
// terraform-mapping.json at release time and which the module's zip does not hold, so `go build` of it fails.
// This main is the same three lines with that step done at start: the set-up copies the two JSON files out of
// the pinned module beside this file, and the schema is given the provider's version (set by -ldflags on
// pkg/version.Version, the @pulumi/kubernetes release whose schema the module serves) before it is served.
package main

import (
	_ "embed"
	"encoding/json"
	"log"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema.json
var schemaJSON []byte

//go:embed terraform-mapping.json
var terraformMappingJSON []byte

// versioned is generate.go's step: the schema with "version" set, and both documents compacted.
func versioned() (schema []byte, mapping []byte) {
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(schemaJSON, &spec); err != nil {
		log.Fatalf("the embedded schema.json does not parse: %v", err)
	}
	v, err := json.Marshal(version.Version)
	if err != nil {
		log.Fatal(err)
	}
	spec["version"] = v
	if schema, err = json.Marshal(spec); err != nil {
		log.Fatal(err)
	}
	var m interface{}
	if err := json.Unmarshal(terraformMappingJSON, &m); err != nil {
		log.Fatalf("the embedded terraform-mapping.json does not parse: %v", err)
	}
	if mapping, err = json.Marshal(m); err != nil {
		log.Fatal(err)
	}
	return schema, mapping
}

func main() {
	if version.Version == "" {
		log.Fatal("built without a version: -ldflags -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=…")
	}
	schema, mapping := versioned()
	provider.Serve("kubernetes", version.Version, schema, mapping)
}
