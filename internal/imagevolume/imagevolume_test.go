package imagevolume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
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

func TestParseImageVolumesRefusesRecordsPrepareCannotWrite(t *testing.T) {
	const key = "0123456789abcdef01234567"
	mount := func(path string, index int) string {
		return fmt.Sprintf(`{"containerPath":%q,"image":"i","imageId":"sha256:1","index":%d}`, path, index)
	}
	record := func(key string, mounts ...string) string {
		return fmt.Sprintf(`{"v":1,"key":%q,"mounts":[%s]}`, key, strings.Join(mounts, ","))
	}
	for _, tc := range []struct {
		name, label string
		want        string // "none", "ok" or "refused"
	}{
		{"empty label", "", "none"},
		{"ours", record(key, mount("/a", 0), mount("/b", 1)), "ok"},
		{"Docker's mounts only", record("", mount("/a", 0)), "ok"},
		{"a key climbing out", record("../../evil", mount("/a", 0)), "refused"},
		{"an absolute key", record("/etc", mount("/a", 0)), "refused"},
		{"a key too short", record(key[:23], mount("/a", 0)), "refused"},
		{"a key in capitals", record(strings.ToUpper(key), mount("/a", 0)), "refused"},
		{"an index out of range", record(key, mount("/a", 1)), "refused"},
		{"a negative index", record(key, mount("/a", -1)), "refused"},
		{"an index twice", record(key, mount("/a", 0), mount("/b", 0)), "refused"},
		{"a relative container path", record(key, mount("a", 0)), "refused"},
		{"not JSON", "{", "refused"},
	} {
		set, err := parseImageVolumes(map[string]string{Label: tc.label})
		got := "ok"
		switch {
		case err != nil:
			got = "refused"
		case set == nil:
			got = "none"
		}
		if got != tc.want {
			t.Errorf("%s: %s (%v), want %s", tc.name, got, err, tc.want)
		}
	}
}

// recordingMounter records every call; it mounts nothing.
type recordingMounter struct{ calls []string }

func (m *recordingMounter) MountLayers(target string, _ []string) error {
	m.calls = append(m.calls, "mount "+target)
	return nil
}

func (m *recordingMounter) Unmount(target string) error {
	m.calls = append(m.calls, "unmount "+target)
	return nil
}

func (m *recordingMounter) MountPointsUnder(dir string) ([]string, error) {
	m.calls = append(m.calls, "list "+dir)
	return nil, nil
}

// Start ignores a record it refuses, with one warning naming the container, and nothing is
// mounted, unmounted or removed for it; a container whose label is empty has no record.
func TestStartIgnoresRefusedRecords(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	root := filepath.Join(base, "state", "cri-dockerd")
	// What "../../evil" from ROOT/image-volumes names.
	evil := filepath.Join(base, "state", "evil")
	if err := os.MkdirAll(filepath.Join(evil, "0"), 0o755); err != nil {
		t.Fatal(err)
	}
	fake := libdocker.NewFake()
	img := libdocker.FakeImage("", "", "busybox:1")
	imgID := fake.AddImage(img)
	labels := map[string]string{
		"climbing": fmt.Sprintf(`{"v":1,"key":"../../evil","mounts":[{"containerPath":"/a","image":"busybox:1","imageId":%q,"index":0}]}`, imgID),
		"indexed":  fmt.Sprintf(`{"v":1,"key":"0123456789abcdef01234567","mounts":[{"containerPath":"/a","image":"busybox:1","imageId":%q,"index":7}]}`, imgID),
		"none":     "",
	}
	ids := map[string]string{}
	for name, label := range labels {
		id, err := fake.CreateContainer(ctx, name, &container.Config{Image: "busybox:1", Labels: map[string]string{Label: label}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	logger, hook := logtest.NewNullLogger()
	mounter := &recordingMounter{}
	v := New(Config{Docker: fake, Log: logrus.NewEntry(logger), RootDirectory: root, Mounter: mounter})
	if err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	var warned []string
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			warned = append(warned, e.Message)
		}
	}
	if len(warned) != 2 || !strings.Contains(strings.Join(warned, "\n"), "container climbing:") || !strings.Contains(strings.Join(warned, "\n"), "container indexed:") {
		t.Errorf("warnings %q, want one for each refused record, naming its container", warned)
	}
	if v.Len() != 0 {
		t.Errorf("the index holds %d containers, want none", v.Len())
	}
	if users := v.UsersOf(ctx, imgID); len(users) != 0 {
		t.Errorf("image %s kept from removal by %v", imgID, users)
	}
	for name, id := range ids {
		if err := v.EnsureMounted(ctx, id); err != nil {
			t.Errorf("EnsureMounted(%s): %v", name, err)
		}
		if err := v.ReleaseContainer(id); err != nil {
			t.Errorf("ReleaseContainer(%s): %v", name, err)
		}
	}
	if len(mounter.calls) != 0 {
		t.Errorf("mounter calls %q, want none", mounter.calls)
	}
	if _, err := os.Stat(filepath.Join(evil, "0")); err != nil {
		t.Errorf("the directory a refused key names: %v", err)
	}
}
