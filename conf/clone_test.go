package conf

import (
	"reflect"
	"testing"
)

// TestCloneDeep checks that a clone shares no memory with its original, walking every
// pointer and slice so that a field added later without a Clone line fails here.
func TestCloneDeep(t *testing.T) {
	c := Default()
	c.Listeners = append(c.Listeners, Listener{Name: "s", Type: "tls", Address: ":8883", TLS: &TLS{CertFile: "c"}})
	c.Cluster = &Cluster{NodeName: "n1", Seeds: []string{"127.0.0.1:7946"}}
	n := c.Clone()
	if !reflect.DeepEqual(c, n) {
		t.Fatal("clone differs from its original")
	}
	var walk func(path string, a, b reflect.Value)
	walk = func(path string, a, b reflect.Value) {
		switch a.Kind() {
		case reflect.Pointer:
			if a.IsNil() {
				return
			}
			if a.Pointer() == b.Pointer() {
				t.Errorf("%s: shared pointer", path)
			}
			walk(path, a.Elem(), b.Elem())
		case reflect.Slice:
			if a.Len() > 0 && a.Pointer() == b.Pointer() {
				t.Errorf("%s: shared slice", path)
			}
			for i := range a.Len() {
				walk(path+"[]", a.Index(i), b.Index(i))
			}
		case reflect.Struct:
			for i := range a.NumField() {
				walk(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))
			}
		}
	}
	walk("Config", reflect.ValueOf(c), reflect.ValueOf(n))
}
