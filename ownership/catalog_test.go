package ownership

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// holdsOnANode lists the conditions whose holds name the node they are on
// (hs.add with a node in evaluateReports): only these can depend on
// another.
var holdsOnANode = map[Condition]bool{NodeOffline: true, HostRedundancyLost: true, MultipathNotDiscovering: true,
	PathDegraded: true, ConnectedToOneNodeOnly: true, VolumeNotOnPreferred: true}

// Every condition the core raises has one complete entry, with a unique
// code, and its dependencies are node conditions of the catalog.
func TestCatalog(t *testing.T) {
	require.Len(t, Conditions, 10)
	require.Len(t, Catalog(), len(Conditions))
	codes := map[string]bool{}
	for _, c := range Conditions {
		e, ok := Lookup(c)
		require.True(t, ok, c)
		require.Equal(t, c, e.Condition)
		require.NotEmpty(t, e.Title)
		require.Contains(t, []Severity{Critical, Major, Minor}, e.Severity)
		require.NotEmpty(t, e.Detection, c)
		require.NotEmpty(t, e.Meaning, c)
		require.GreaterOrEqual(t, len(e.Procedure), 3, "%s: a procedure has steps", c)
		require.False(t, codes[e.Code], "code %s used twice", e.Code)
		codes[e.Code] = true
		for _, d := range e.DependsOn {
			require.Equal(t, NodeOffline, d, "%s: a dependency is a node condition", c)
		}
		if len(e.DependsOn) > 0 {
			require.True(t, holdsOnANode[c], "%s has dependencies, but its holds name no node to match them on", c)
		}
	}
	_, ok := Lookup("node-on-fire")
	require.False(t, ok)
	// Catalog hands out a copy.
	cat := Catalog()
	cat[0].Title = "changed"
	w, _ := Lookup(cat[0].Condition)
	require.NotEqual(t, "changed", w.Title)
}

// A per-condition debounce names a condition of the catalog and is not
// negative.
func TestDebouncesValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		m    map[Condition]int
		ok   bool
	}{
		{"none", nil, true},
		{"immediate", map[Condition]int{NodeOffline: 0}, true},
		{"longer", map[Condition]int{PathDegraded: 30}, true},
		{"unknown", map[Condition]int{"node-on-fire": 1}, false},
		{"negative", map[Condition]int{NodeOffline: -1}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Debounces = tt.m
			if tt.ok {
				require.NoError(t, cfg.Validate())
			} else {
				require.ErrorContains(t, cfg.Validate(), "Debounces")
			}
		})
	}
}
