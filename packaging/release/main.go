// Command release writes cri-dockerd's release artifacts into a dist directory, from binaries
// `make release` has cross-compiled: for each architecture upstream's tgz layout
// (cri-dockerd-VERSION.ARCH.tgz holding cri-dockerd/cri-dockerd, which kubespray downloads), a
// .deb and an .rpm built with nfpm, and SHA256SUMS over all of them. It is a module of its own
// so that nfpm's dependencies stay out of the daemon's go.mod. docs/packages.md describes what
// the packages hold.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func main() {
	var (
		version = flag.String("version", "", "version of the binaries (packaging/version.sh); no leading v")
		root    = flag.String("root", "../..", "the repository: units, README, docs, LICENSE")
		binDir  = flag.String("bin", "", "directory holding linux-ARCH/cri-dockerd for each -arch")
		dist    = flag.String("dist", "dist", "output directory, created")
		arches  = flag.String("arch", "amd64 arm64", "GOARCH values, space or comma separated")
		mtime   = flag.Int64("mtime", 0, "modification time of every packaged file, Unix seconds (the commit time, so builds repeat)")
		maint   = flag.String("maintainer", "The cri-dockerd Authors <noreply@cri-dockerd.invalid>", "package maintainer")
	)
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("release: ")
	if *version == "" || *binDir == "" {
		log.Fatal("-version and -bin are required")
	}
	if strings.HasPrefix(*version, "v") {
		log.Fatalf("version %q: give it without the leading v (upstream's file names have none)", *version)
	}
	t := time.Unix(*mtime, 0).UTC()
	if *mtime == 0 {
		t = time.Now().UTC().Truncate(time.Second)
	}
	if err := os.MkdirAll(*dist, 0o755); err != nil {
		log.Fatal(err)
	}
	stage, err := os.MkdirTemp("", "cri-dockerd-release-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(stage)
	if err := writeStage(*root, stage); err != nil {
		log.Fatal(err)
	}

	var written []string
	for _, arch := range strings.FieldsFunc(*arches, func(r rune) bool { return r == ' ' || r == ',' }) {
		bin := filepath.Join(*binDir, "linux-"+arch, "cri-dockerd")
		if _, err := os.Stat(bin); err != nil {
			log.Fatal(err)
		}
		tgz := fmt.Sprintf("cri-dockerd-%s.%s.tgz", *version, arch)
		if err := writeTgz(filepath.Join(*dist, tgz), bin, t); err != nil {
			log.Fatalf("%s: %v", tgz, err)
		}
		written = append(written, tgz)
		for _, format := range []string{"deb", "rpm"} {
			p := pkgSpec{version: *version, arch: arch, bin: bin, root: *root, stage: stage, mtime: t, maintainer: *maint}
			name, err := p.build(format, *dist)
			if err != nil {
				log.Fatalf("%s %s: %v", format, arch, err)
			}
			written = append(written, name)
		}
	}
	if err := writeSums(*dist, written); err != nil {
		log.Fatal(err)
	}
	for _, n := range written {
		fmt.Println(filepath.Join(*dist, n))
	}
}

// writeSums writes SHA256SUMS in sha256sum's format ("HASH  NAME"), sorted by name, so that
// `sha256sum -c SHA256SUMS` in the dist directory checks every artifact.
func writeSums(dist string, names []string) error {
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		f, err := os.Open(filepath.Join(dist, n))
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), n)
	}
	return os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte(b.String()), 0o644)
}
