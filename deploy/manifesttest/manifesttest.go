// Package manifesttest reads the YAML manifests of a deploy/ directory for its tests: every
// document is decoded strictly into the k8s.io/api type its apiVersion/kind names, so a typo'd
// field or an unexpected kind fails the test instead of being ignored.
package manifesttest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Doc is one decoded document and the file it came from.
type Doc struct {
	File string
	Obj  any
}

var separator = regexp.MustCompile(`(?m)^---\s*$`)

// Load decodes every document of every *.yaml file in the current directory. kinds maps
// "apiVersion/Kind" (e.g. "apps/v1/StatefulSet") to a constructor of the object to decode into;
// any other kind fails the test.
func Load(t *testing.T, kinds map[string]func() any) []Doc {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var out []Doc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Parse(t, f, b, kinds)...)
	}
	return out
}

// Parse decodes the documents of one multi-document YAML stream (a file, or `helm template`'s
// output) as Load does; file names them in failures and in Doc.File.
func Parse(t *testing.T, file string, b []byte, kinds map[string]func() any) []Doc {
	t.Helper()
	var out []Doc
	for i, part := range separator.Split(string(b), -1) {
		if strings.TrimSpace(stripComments(part)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(part), &tm); err != nil {
			t.Fatalf("%s document %d: %v", file, i+1, err)
		}
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			t.Fatalf("%s document %d: unexpected kind %s %s", file, i+1, tm.APIVersion, tm.Kind)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict([]byte(part), obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", file, i+1, tm.Kind, err)
		}
		out = append(out, Doc{file, obj})
	}
	return out
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
