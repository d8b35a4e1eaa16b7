package core

import "testing"

// One row per engine we meet on nodes: what each can do.
func TestFeaturesOfEachEngine(t *testing.T) {
	for _, tc := range []struct {
		api, docker string
		want        engineFeatures
	}{
		{"1.41", "20.10", engineFeatures{}},
		{"1.42", "23", engineFeatures{shimNames: true}},
		{"1.43", "24", engineFeatures{shimNames: true, annotations: true}},
		{"1.44", "25", engineFeatures{shimNames: true, annotations: true, cdi: true, readOnlyModes: true}},
		{"1.47", "27", engineFeatures{shimNames: true, annotations: true, cdi: true, readOnlyModes: true}},
		{"1.48", "28.0", engineFeatures{shimNames: true, annotations: true, cdi: true, readOnlyModes: true, imageMounts: true}},
		{"1.51", "28.5 / 29 (our client's top)", engineFeatures{shimNames: true, annotations: true, cdi: true, readOnlyModes: true, imageMounts: true}},
	} {
		tc.want.apiVersion = tc.api
		if got := featuresOf(tc.api); got != tc.want {
			t.Errorf("API %s (Docker %s): %+v, want %+v", tc.api, tc.docker, got, tc.want)
		}
	}
}
