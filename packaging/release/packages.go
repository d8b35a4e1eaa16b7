package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the "deb" packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the "rpm" packager
)

const (
	pkgName  = "cri-dockerd" // upstream's package name: installing ours upgrades theirs
	homepage = "https://github.com/cri-dockerd/cri-dockerd"
	docDir   = "/usr/share/doc/cri-dockerd"
	// Upstream's rpm spec has "Epoch: 3", and rpm compares the epoch before the version:
	// without it 0.5.0 would sort below their 3:0.4.3 and not upgrade it. Their debs have none.
	rpmEpoch = "3"
	// Any Docker Engine package installs dockerd there: docker-ce, moby-engine (Fedora),
	// docker-ee (Mirantis), Amazon Linux's docker. A file dependency works with every rpm and
	// dnf/zypper version, unlike a rich "(docker-ce or moby-engine)" (rpm >= 4.13 only).
	rpmDockerDep = "/usr/bin/dockerd"

	description = `Kubernetes CRI server for the Docker Engine
cri-dockerd serves the Kubernetes Container Runtime Interface on /run/cri-dockerd.sock
and runs pods on the Docker Engine. A pod's RuntimeClass handler becomes the Docker
runtime of its sandbox and containers (gVisor, Kata, crun, containerd shims).
It replaces upstream cri-dockerd: same socket, flags, unit names and package name.`
)

// debDepends: Debian's and Ubuntu's docker.io, Docker's docker-ce or Microsoft's moby-engine.
var debDepends = []string{"docker.io | docker-ce | moby-engine"}

// pkgSpec is one package to build: one binary, one architecture.
type pkgSpec struct {
	version, arch, bin, root, stage, maintainer string
	mtime                                       time.Time
}

// build writes the package of the format ("deb" or "rpm") into dist under nfpm's conventional
// name (cri-dockerd_VERSION_amd64.deb, cri-dockerd-VERSION-1.x86_64.rpm) and returns the name.
func (p pkgSpec) build(format, dist string) (string, error) {
	info, err := p.info(format)
	if err != nil {
		return "", err
	}
	packager, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	name := packager.ConventionalFileName(info)
	f, err := os.Create(filepath.Join(dist, name))
	if err != nil {
		return "", err
	}
	if err := packager.Package(info, f); err != nil {
		f.Close()
		return "", err
	}
	return name, f.Close()
}

func (p pkgSpec) info(format string) (*nfpm.Info, error) {
	contents, err := p.contents(format)
	if err != nil {
		return nil, err
	}
	scripts := filepath.Join(p.root, "packaging/release/scripts", format)
	info := &nfpm.Info{
		Name:     pkgName,
		Arch:     p.arch, // GOARCH; nfpm maps it to amd64/arm64 (deb), x86_64/aarch64 (rpm)
		Platform: "linux",
		// The version is already in each format's syntax (packaging/version.sh): no semver
		// parsing, and a deb without a Debian revision carries exactly what --version prints.
		Version:       p.version,
		VersionSchema: "none",
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    p.maintainer,
		Vendor:        "The cri-dockerd Authors",
		Homepage:      homepage,
		License:       "Apache-2.0",
		Description:   description,
		MTime:         p.mtime,
		Overridables: nfpm.Overridables{
			Contents: contents,
			Umask:    0o022,
		},
	}
	switch format {
	case "deb":
		info.Depends = debDepends
		info.Scripts = nfpm.Scripts{
			PostInstall: filepath.Join(scripts, "postinst"),
			PreRemove:   filepath.Join(scripts, "prerm"),
			PostRemove:  filepath.Join(scripts, "postrm"),
		}
	case "rpm":
		info.Epoch = rpmEpoch
		info.Release = "1"
		info.Depends = []string{rpmDockerDep}
		info.RPM.Group = "System Environment/Daemons"
		// rpm keeps the summary apart; a deb's description starts with it.
		info.RPM.Summary, info.Description, _ = strings.Cut(description, "\n")
		info.RPM.Packager = p.maintainer
		info.Scripts = nfpm.Scripts{
			PostInstall: filepath.Join(scripts, "post"),
			PreRemove:   filepath.Join(scripts, "preun"),
			PostRemove:  filepath.Join(scripts, "postun"),
		}
	default:
		return nil, fmt.Errorf("unknown format %q", format)
	}
	return nfpm.WithDefaults(info), nil
}

// contents: the binary, the two units in the distribution's systemd unit directory (not
// conffiles: units under /lib are the package's, admins override them in /etc), the license
// and the docs.
func (p pkgSpec) contents(format string) (files.Contents, error) {
	unitDir := "/lib/systemd/system" // Debian's, as upstream's deb
	docType := ""
	if format == "rpm" {
		unitDir = "/usr/lib/systemd/system"
		docType = files.TypeRPMDoc
	}
	c := files.Contents{
		file(p.bin, "/usr/bin/cri-dockerd", 0o755, ""),
		file(filepath.Join(p.stage, "cri-docker.service"), unitDir+"/cri-docker.service", 0o644, ""),
		file(filepath.Join(p.root, "packaging/systemd/cri-docker.socket"), unitDir+"/cri-docker.socket", 0o644, ""),
		file(filepath.Join(p.root, "README.md"), docDir+"/README.md", 0o644, docType),
	}
	// docs/*.md keep their directory, so README's links (docs/install.md) still resolve.
	docs, err := filepath.Glob(filepath.Join(p.root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		return nil, fmt.Errorf("no docs/*.md under %s (%v)", p.root, err)
	}
	for _, d := range docs {
		c = append(c, file(d, docDir+"/docs/"+filepath.Base(d), 0o644, docType))
	}
	license := filepath.Join(p.root, "LICENSE")
	switch format {
	case "deb":
		c = append(c,
			file(license, docDir+"/LICENSE", 0o644, ""),
			// Debian policy's place for the license statement.
			file(filepath.Join(p.stage, "copyright"), docDir+"/copyright", 0o644, ""))
	case "rpm":
		// %license files go to /usr/share/licenses and stay with --excludedocs. rpm does not
		// remove directories it was not told about: the package owns its own.
		c = append(c,
			file(license, "/usr/share/licenses/cri-dockerd/LICENSE", 0o644, files.TypeRPMLicense),
			dir(docDir), dir(docDir+"/docs"), dir("/usr/share/licenses/cri-dockerd"))
	}
	return c, nil
}

func file(src, dst string, mode os.FileMode, typ string) *files.Content {
	return &files.Content{Source: src, Destination: dst, Type: typ, FileInfo: &files.ContentFileInfo{Mode: mode}}
}

func dir(dst string) *files.Content {
	return &files.Content{Destination: dst, Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Mode: 0o755}}
}

// writeStage writes the files generated for the packages into stage: cri-docker.service with
// ExecStart at /usr/bin (the source unit says /usr/local/bin, where `make install` puts the
// binary) and Debian's copyright file.
func writeStage(root, stage string) error {
	unit, err := os.ReadFile(filepath.Join(root, "packaging/systemd/cri-docker.service"))
	if err != nil {
		return err
	}
	const from, to = "/usr/local/bin/cri-dockerd", "/usr/bin/cri-dockerd"
	if !bytes.Contains(unit, []byte("ExecStart="+from+" ")) {
		return fmt.Errorf("packaging/systemd/cri-docker.service: no ExecStart=%s to point at %s", from, to)
	}
	unit = bytes.ReplaceAll(unit, []byte(from), []byte(to))
	if err := os.WriteFile(filepath.Join(stage, "cri-docker.service"), unit, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stage, "copyright"), []byte(debCopyright), 0o644)
}

// debCopyright is in Debian's machine-readable format (DEP-5).
const debCopyright = `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: cri-dockerd
Source: ` + homepage + `

Files: *
Copyright: The cri-dockerd Authors
License: Apache-2.0

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License");
 you may not use this file except in compliance with the License.
 You may obtain a copy of the License at
 .
 http://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS,
 WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 See the License for the specific language governing permissions and
 limitations under the License.
 .
 On Debian systems, the complete text of the Apache License, Version 2.0,
 can be found in "/usr/share/common-licenses/Apache-2.0".
`
