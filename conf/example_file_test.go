package conf

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// exampleFile is the sample configuration shipped at the repository root.
const exampleFile = "../bifrost.example.yaml"

// TestExampleFileIsDefault keeps the sample true: it must load to exactly Default().
func TestExampleFileIsDefault(t *testing.T) {
	c, err := Load(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	c.Store.EngineDefaulted = true // the sample names the default engine; Default() has it unset
	if !reflect.DeepEqual(c, Default()) {
		t.Fatalf("%s does not load to Default():\n%+v\n%+v", exampleFile, c, Default())
	}
}

// TestExampleFileShowsEveryKey checks the sample mentions every key of the schema (the
// tls keys in a commented-out listener), so a new field cannot be forgotten there.
func TestExampleFileShowsEveryKey(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	for typ, keys := range knownKeys() {
		for _, key := range keys {
			if !strings.Contains(string(data), " "+key+":") && !strings.HasPrefix(string(data), key+":") &&
				!strings.Contains(string(data), "\n"+key+":") {
				t.Errorf("%s: key %s of %s is missing", exampleFile, key, typ)
			}
		}
	}
}
