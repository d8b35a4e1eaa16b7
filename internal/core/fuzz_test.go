package core

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FuzzValidateConfig: validateSandboxConfig and validateContainerConfig never panic, and what
// they accept makes Docker names that parse back to the same metadata, carries no reserved
// label key, and has ports within 1-65535 and a hostname Linux takes.
func FuzzValidateConfig(f *testing.F) {
	f.Add("nginx", "default", "uid-1", uint32(0), "web", "app", "v", "web-0", int32(80), int32(8080), int32(0), int32(0), "64Mi", "busybox")
	f.Add("p", "kube-system", "", uint32(7), "c", "io.cri-dockerd.x", "", "", int32(1), int32(0), int32(1), int32(2), "", "")
	f.Add("a_b", "ns", "u", uint32(4294967295), "c", "annotation.k", "v", "UPPER", int32(0), int32(70000), int32(9), int32(-1), "1Ei", "i")
	f.Add(".x", "ns", "u/v", uint32(1), "", "io.kubernetes.sandbox.id", "x", strings.Repeat("a", 65), int32(65535), int32(65535), int32(3), int32(1), "4095", "img")
	// The input a CI fuzz run found: resource.ParseQuantity took over 10 s on it (quantity.Parse).
	f.Add("p", "ns", "u", uint32(0), "c", "k", "v", "h", int32(80), int32(0), int32(0), int32(0), "1e-99999999", "i")
	f.Fuzz(func(t *testing.T, name, namespace, uid string, attempt uint32, cname, labelKey, labelValue, hostname string,
		containerPort, hostPort, protocol, nsMode int32, shm, image string) {
		sandbox := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid, Attempt: attempt},
			Hostname:     hostname,
			Labels:       map[string]string{labelKey: labelValue},
			Annotations:  map[string]string{shmSizeAnnotation: shm},
			PortMappings: []*runtimeapi.PortMapping{{ContainerPort: containerPort, HostPort: hostPort, Protocol: runtimeapi.Protocol(protocol)}},
			Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode(nsMode), Pid: runtimeapi.NamespaceMode(nsMode)},
			}},
		}
		if shm == "" {
			sandbox.Annotations = nil
		}
		if err := validateSandboxConfig(sandbox); err == nil {
			for _, c := range []string{name, namespace} {
				if c == "" || len(c) > maxNameComponent || !nameComponent.MatchString(c) {
					t.Fatalf("accepted name component %q", c)
				}
			}
			if strings.Contains(uid, nameDelimiter) {
				t.Fatalf("accepted uid %q", uid)
			}
			if checkCRILabels("", sandbox.Labels) != nil {
				t.Fatalf("accepted reserved label key %q", labelKey)
			}
			if containerPort < 1 || containerPort > 65535 || hostPort < 0 || hostPort > 65535 {
				t.Fatalf("accepted ports %d->%d", hostPort, containerPort)
			}
			if _, ok := runtimeapi.Protocol_name[protocol]; !ok {
				t.Fatalf("accepted protocol %d", protocol)
			}
			if _, ok := runtimeapi.NamespaceMode_name[nsMode]; !ok {
				t.Fatalf("accepted namespace mode %d", nsMode)
			}
			if len(hostname) > maxHostnameLen || strings.ContainsAny(hostname, "/_ \x00") {
				t.Fatalf("accepted hostname %q", hostname)
			}
			p, err := parseName(makeSandboxName(sandbox.Metadata))
			if err != nil || p.container != sandboxContainerName || p.pod != name || p.namespace != namespace || p.uid != uid || p.attempt != attempt {
				t.Fatalf("sandbox name of %v parses to %+v, %v", sandbox.Metadata, p, err)
			}

			ccfg := &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: cname, Attempt: attempt},
				Image:    &runtimeapi.ImageSpec{Image: image},
				Labels:   map[string]string{labelKey: labelValue},
			}
			if err := validateContainerConfig(ccfg); err == nil {
				if cname == "" || !nameComponent.MatchString(cname) || image == "" {
					t.Fatalf("accepted container name %q, image %q", cname, image)
				}
				p, err := parseName(makeContainerName(sandbox.Metadata, ccfg.Metadata))
				if err != nil || p.container != cname || p.pod != name || p.namespace != namespace || p.uid != uid || p.attempt != attempt {
					t.Fatalf("container name parses to %+v, %v", p, err)
				}
			}
		}
	})
}

// FuzzContainerLogPath: containerLogPath never panics, and an accepted path is a file inside
// the log directory (filepath.Rel gives no "..", and not the directory itself).
func FuzzContainerLogPath(f *testing.F) {
	f.Add("/var/log/pods/ns_pod_uid", "c/0.log")
	f.Add("/var/log/pods/ns_pod_uid", "../../../etc/shadow")
	f.Add("/var/log/pods/ns_pod_uid", "/etc/shadow")
	f.Add("/var/log/pods/../x", "c/0.log")
	f.Add("relative/dir", "0.log")
	f.Add("/", "c/./.")
	f.Add("/var/log/pods", "c/../..")
	f.Add("", "0.log")
	f.Fuzz(func(t *testing.T, dir, path string) {
		got, err := containerLogPath(dir, path)
		if err != nil {
			return
		}
		if path == "" {
			if got != "" {
				t.Fatalf("empty log_path gave %q", got)
			}
			return
		}
		rel, err := filepath.Rel(filepath.Clean(dir), got)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
			t.Fatalf("accepted %q in %q: %q is not inside (rel %q, %v)", path, dir, got, rel, err)
		}
		if !filepath.IsAbs(got) || got != filepath.Clean(got) {
			t.Fatalf("accepted %q in %q: %q is not a clean absolute path", path, dir, got)
		}
	})
}

// FuzzLabels: CRI labels and annotations that checkCRILabels accepts come back exactly through
// makeLabels and splitLabels, even among our own labels and an image's; reserved keys never
// come out as user labels.
func FuzzLabels(f *testing.F) {
	f.Add("app", "web", "kubernetes.io/config.seen", "2024", "maintainer", "me")
	f.Add("io.cri-dockerd.runtime-handler", "x", "", "", "io.kubernetes.docker.type", "container")
	f.Add("annotation.x", "y", "annotation.x", "z", "annotation.k", "v")
	f.Add("", "", "io.kubernetes.sandbox.id", "id", "io.cri-dockerd.cri-keys", `["io.kubernetes.docker.type"]`)
	f.Fuzz(func(t *testing.T, lk, lv, ak, av, imageKey, imageValue string) {
		if !utf8.ValidString(lk) || !utf8.ValidString(ak) {
			// Not a CRI request: protobuf refuses strings that are not UTF-8. (The key list,
			// JSON, would hold U+FFFD for the bad bytes, as Docker's JSON API would the key.)
			return
		}
		labels := map[string]string{lk: lv}
		annotations := map[string]string{ak: av}
		ld := makeLabels(labels, annotations)
		// What the caller and Docker add: our labels, then an image's label where not set.
		ld[containerTypeLabel] = containerTypeContainer
		ld[sandboxIDLabel] = "sandbox"
		ld[handlerLabel] = "runc"
		if _, set := ld[imageKey]; !set {
			ld[imageKey] = imageValue
		}
		gotL, gotA := splitLabels(ld)
		for k := range gotL {
			if internalLabels[k] || strings.HasPrefix(k, ourLabelPrefix) || strings.HasPrefix(k, annotationPrefix) {
				t.Fatalf("reserved key %q came out as a user label", k)
			}
		}
		if checkCRILabels("", labels) != nil {
			return
		}
		if len(gotL) != 1 || gotL[lk] != lv {
			t.Fatalf("labels %q came back as %q (docker labels %q)", labels, gotL, ld)
		}
		if len(gotA) != 1 || gotA[ak] != av {
			t.Fatalf("annotations %q came back as %q (docker labels %q)", annotations, gotA, ld)
		}
	})
}

// FuzzParseName: parseName never panics on any Docker name, and what it parses names the same
// pod when made again (a randomized suffix is ignored).
func FuzzParseName(f *testing.F) {
	f.Add("/k8s_POD_nginx_default_uid_0")
	f.Add("/k8s_web_nginx_default_uid_3_0a1b2c3d")
	f.Add("k8s_web_nginx_default_uid_99999999999")
	f.Add("/k8s______")
	f.Add("/other")
	f.Fuzz(func(t *testing.T, dockerName string) {
		p, err := parseName(dockerName)
		if err != nil {
			return
		}
		sm, cm := p.sandboxMetadata(), p.containerMetadata()
		again := makeContainerName(sm, cm)
		q, err := parseName(again)
		if err != nil || q != p {
			t.Fatalf("%q parses to %+v; made again %q parses to %+v, %v", dockerName, p, again, q, err)
		}
		if want := strings.TrimPrefix(dockerName, "/"); !strings.HasPrefix(want, again[:len(again)-len(strconv.FormatUint(uint64(p.attempt), 10))]) {
			t.Fatalf("%q parses to %+v, which names %q", dockerName, p, again)
		}
	})
}

// FuzzDecodeCheckpoint: the checkpoint decoder never panics on arbitrary bytes, and a
// checkpoint it accepts re-encodes (as put writes it) to bytes that decode to the same.
func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add("sb1", []byte(`{"version":1,"sandboxId":"sb1","state":"ready","network":{"plugin":"cni","network":"cri-dockerd","ifName":"eth0","ips":["10.88.0.7"]}}`))
	f.Add("sb1", []byte(`{"version":1,"sandboxId":"sb1","state":"setting-up","network":{"plugin":"cni","portMappings":[{"hostPort":80,"containerPort":8080,"protocol":"tcp"}],"bandwidth":{"ingressRate":1000},"dns":{"servers":["1.1.1.1"]},"podCIDRs":["10.88.0.0/16"]}}`))
	f.Add("sb1", []byte(`{"version":2,"sandboxId":"sb1","network":{}}`))
	f.Add("sb1", []byte(`{"version":1,"sandboxId":"other","network":{}}`))
	f.Add("sb1", []byte(`{"version":1,"sandboxId":"sb1","network":null}`))
	f.Add("sb1", []byte(`{"version":1,`))
	f.Fuzz(func(t *testing.T, id string, data []byte) {
		cp, err := decodeCheckpoint(id, data)
		if err != nil {
			return
		}
		enc, err := json.Marshal(cp)
		if err != nil {
			t.Fatalf("decoded %+v, which does not encode: %v", cp, err)
		}
		again, err := decodeCheckpoint(id, enc)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", enc, err)
		}
		enc2, err := json.Marshal(again)
		if err != nil || string(enc2) != string(enc) {
			t.Fatalf("decoded %s, re-encoded %s, which decodes to %s (%v)", data, enc, enc2, err)
		}
		if again.SandboxID != id || again.Version != checkpointVersion || again.Network == nil {
			t.Fatalf("decoded %+v for %q", again, id)
		}
	})
}
