package core

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Our names have six parts, seven with the random suffix a taken name gets; nothing else is
// one of ours.
func TestParseNameTakesSixOrSevenParts(t *testing.T) {
	m := &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "1234", Attempt: 2}
	for name, ok := range map[string]bool{
		makeSandboxName(m):                      true,
		"/" + randomizeName(makeSandboxName(m)): true,
		"k8s_POD_web_default_1234":              false,
		"k8s_POD_web_default_1234_2_ab_cd":      false,
		"k9s_POD_web_default_1234_2":            false,
		"k8s_POD_web_default_1234_x":            false,
	} {
		p, err := parseName(name)
		if (err == nil) != ok {
			t.Errorf("parseName(%q) = %+v, %v; want accepted %v", name, p, err, ok)
			continue
		}
		if ok && (p.container != "POD" || p.pod != "web" || p.namespace != "default" || p.uid != "1234" || p.attempt != 2) {
			t.Errorf("parseName(%q) = %+v", name, p)
		}
	}
}

// A name component may be maxNameComponent characters long, not one more.
func TestNameComponentLengthLimit(t *testing.T) {
	if err := checkNameComponent("name", strings.Repeat("a", maxNameComponent), true); err != nil {
		t.Errorf("%d characters: %v", maxNameComponent, err)
	}
	if err := checkNameComponent("name", strings.Repeat("a", maxNameComponent+1), true); err == nil {
		t.Errorf("%d characters accepted", maxNameComponent+1)
	}
}

// The parsed key lists are shared between objects, and the cache starts over when full: each
// lookup still answers its own list.
func TestKeySetCacheAnswersEachListPastItsBound(t *testing.T) {
	c := &keySetCache{}
	for i := 0; i < keySetCacheMax+10; i++ {
		k := "k" + strconv.Itoa(i)
		set := c.get(`["` + k + `"]`)
		if len(set) != 1 || !set[k] {
			t.Fatalf("list %d: %v", i, set)
		}
	}
	if len(c.sets) > keySetCacheMax {
		t.Errorf("%d lists cached, bound %d", len(c.sets), keySetCacheMax)
	}
	if set := c.get("not json"); set != nil {
		t.Errorf("a value that is no list gives %v, want nil (every label is the request's)", set)
	}
	a, b := c.get(`["x","y"]`), c.get(`["x","y"]`)
	if len(a) != 2 || fmt.Sprintf("%p", a) != fmt.Sprintf("%p", b) {
		t.Errorf("one list decoded twice (%p, %p) or wrongly: %v", a, b, a)
	}
}
