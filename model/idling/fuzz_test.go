package idling

import (
	"reflect"
	"testing"
)

// FuzzParseTargets decodes, encodes and decodes again: a list that was
// read once encodes to one that reads back the same.
func FuzzParseTargets(f *testing.F) {
	for _, s := range []string{
		`[{"kind":"Deployment","name":"web","group":"apps","replicas":2}]`,
		`[{"kind":"ReplicationController","name":"rc-1","replicas":3},{"kind":"StatefulSet","name":"db","group":"apps","replicas":0}]`,
		`[{"kind":"Deployment","name":"web","apiVersion":"extensions/v1beta1","replicas":1}]`,
		`[{"kind":"Deployment","name":"web","group":"apps","replicas":4},{"kind":"Deployment","name":"web","group":"apps","replicas":1}]`,
		`[{"kind":"DeploymentConfig","name":"app","group":"apps.openshift.io","replicas":1}]`,
		`[]`, `null`, ``, `[null]`, `{}`, `[{"kind":"","name":"x","replicas":1}]`,
		`[{"kind":"Deployment","name":"web","replicas":-1}]`, `[{"kind":"Deployment","name":"web","replicas":1e3}]`,
		`[{"kind":"Deployment","name":"web","apiVersion":"a/b/c","replicas":1}]`,
		`[{"kind":"Deployment","name":"w\u00e9b","replicas":1}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		ts, err := ParseTargets("ns/svc", in)
		if err != nil {
			return
		}
		out := FormatTargets(ts)
		again, err := ParseTargets("ns/svc", out)
		if err != nil {
			t.Fatalf("%q read as %+v, encoded as %q, which does not read: %v", in, ts, out, err)
		}
		if !reflect.DeepEqual(ts, again) {
			t.Fatalf("%q read as %+v, encoded as %q, read back as %+v", in, ts, out, again)
		}
		for _, tg := range ts {
			if tg.Replicas < 0 || tg.Kind == "" || tg.Name == "" {
				t.Fatalf("%q: accepted %+v", in, tg)
			}
		}
	})
}
