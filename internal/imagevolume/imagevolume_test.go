package imagevolume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

func TestResolveInRoot(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"etc/ssl", "usr/share"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"etc/certs": "/etc/ssl", "usr/up": "../etc", "loop": "loop", "out": "/../../..", "share": "usr/share/"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hosts"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A chain of 40 links (Linux's MAXSYMLINKS) resolves; one of 41 does not.
	for i := 1; i <= 41; i++ {
		if err := os.Symlink(fmt.Sprintf("l%d", i-1), filepath.Join(root, fmt.Sprintf("l%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("etc", filepath.Join(root, "l0")); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{
		"":              root,
		"etc":           filepath.Join(root, "etc"),
		"etc/certs":     filepath.Join(root, "etc/ssl"),
		"usr/up/ssl":    filepath.Join(root, "etc/ssl"),
		"share":         filepath.Join(root, "usr/share"),
		"loop":          "error",
		"out":           "error",
		"etc/missing":   "error",
		"usr/up/../..":  "error",
		"etc/ssl/../..": root,
		"etc/hosts":     filepath.Join(root, "etc/hosts"), // a file is a path too
		"etc/hosts/x":   "error",
		"l39":           filepath.Join(root, "etc"), // l39 -> ... -> l0 -> etc: 40 links
		"l40":           "error",
	} {
		got, err := resolveInRoot(root, rel)
		if want == "error" {
			if err == nil {
				t.Errorf("resolveInRoot(%q) = %q, want an error", rel, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("resolveInRoot(%q) = %q, %v; want %q", rel, got, err, want)
		}
	}
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/end\04`: `/end\04`, `/trailing\040`: "/trailing "} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// A sub path Docker could not find is named alone when Docker's error names it, and every
// native sub path is named when it does not.
func TestNativeSubPathErrorNamesTheMissingSubPath(t *testing.T) {
	mounts := []imageVolumeMount{
		{ContainerPath: "/a", Image: "img:1", SubPath: "data", Native: true},
		{ContainerPath: "/b", Image: "img:1", SubPath: "conf", Native: true},
	}
	named := fmt.Errorf("%w: stat /var/lib/docker/overlay2/x/merged/conf: no such file or directory", libdocker.ErrSubpathNotFound)
	err := nativeSubPathError(mounts, named)
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `"conf"`) || strings.Contains(err.Error(), `"data"`) {
		t.Errorf("Docker naming conf: %v, want NotFound naming conf alone", err)
	}
	unnamed := fmt.Errorf("%w: the image has no such path", libdocker.ErrSubpathNotFound)
	err = nativeSubPathError(mounts, unnamed)
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `"conf"`) || !strings.Contains(err.Error(), `"data"`) {
		t.Errorf("Docker naming none: %v, want NotFound naming both", err)
	}
}

// noMounts is a Mounter for a Manager that never mounts: nothing is mounted anywhere.
type noMounts struct{}

func (noMounts) MountLayers(string, []string) error        { return errors.New("noMounts: no mounts") }
func (noMounts) Unmount(string) error                      { return nil }
func (noMounts) MountPointsUnder(string) ([]string, error) { return nil, nil }

// Close stops the image volume reaper: nothing of the service works on after it.
func TestCloseStopsTheImageVolumeReaper(t *testing.T) {
	v := New(Config{Docker: libdocker.NewFake(), Log: logrus.NewEntry(logrus.New()), RootDirectory: t.TempDir(), Mounter: noMounts{}})
	if err := v.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := v.done
	v.Close()
	select {
	case <-done:
	default:
		t.Error("the image volume reaper still runs after Close")
	}
}
