package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-dockerd/cri-dockerd/internal/imagevolume"
	"github.com/cri-dockerd/cri-dockerd/internal/libdocker"
)

// Docker object names and labels follow the scheme of dockershim and upstream cri-dockerd, so that
// pods created by upstream cri-dockerd are listed and removable after a node swaps the binary:
//
//	sandbox:   k8s_POD_<pod name>_<namespace>_<pod uid>_<attempt>
//	container: k8s_<container name>_<pod name>_<namespace>_<pod uid>_<attempt>
const (
	namePrefix           = "k8s"
	sandboxContainerName = "POD"
	nameDelimiter        = "_"

	containerTypeLabel     = "io.kubernetes.docker.type"
	containerTypeSandbox   = "podsandbox"
	containerTypeContainer = "container"
	sandboxIDLabel         = "io.kubernetes.sandbox.id"
	containerLogPathLabel  = "io.kubernetes.container.logpath"
	// annotationPrefix marks CRI annotations stored as Docker labels.
	annotationPrefix = "annotation."

	// Labels of our own, which upstream does not know; all under one prefix.
	ourLabelPrefix = "io.cri-dockerd."
	// handlerLabel is the RuntimeClass handler as the kubelet asked for it.
	handlerLabel = ourLabelPrefix + "runtime-handler"
	// dockerRuntimeLabel is the Docker runtime the handler resolved to ("" = daemon default).
	dockerRuntimeLabel = ourLabelPrefix + "docker-runtime"
	// userImageLabel is the image as the user wrote it, when the kubelet passed a resolved ID.
	userImageLabel = ourLabelPrefix + "user-image"
	// criKeysLabel lists the Docker label keys that hold CRI labels and annotations: Docker
	// merges the image's labels into the container's, and those must not come back as CRI labels.
	criKeysLabel = ourLabelPrefix + "cri-keys"
)

// internalLabels are Docker labels of ours that are never returned as CRI labels.
var internalLabels = map[string]bool{
	containerTypeLabel:    true,
	sandboxIDLabel:        true,
	containerLogPathLabel: true,
}

// readBackLabels are the label keys of ours that we read back from Docker objects. Docker
// copies an image's label into a container's labels when the container's config lacks the
// key, so every object we create carries each of them, empty when unused: the image's value
// never lands, and an empty value means none to every reader.
var readBackLabels = []string{
	containerTypeLabel, sandboxIDLabel, containerLogPathLabel,
	handlerLabel, dockerRuntimeLabel, userImageLabel, criKeysLabel,
	logLabel, logDirectoryLabel, cgroupV2Label, imagevolume.Label, privilegedPodLabel,
}

// reserveLabels sets each key of readBackLabels that labels lacks to "".
func reserveLabels(labels map[string]string) {
	for _, k := range readBackLabels {
		if _, ok := labels[k]; !ok {
			labels[k] = ""
		}
	}
}

// checkCRILabels refuses, with InvalidArgument naming the key, a CRI label that would steer
// what we do or that could not come back as the label it was (see docs/security.md):
//   - a key of ours: the internal labels above (container type, sandbox ID, log path) and
//     every key under io.cri-dockerd. (runtime handler, log mode, key list, image volumes ...);
//   - a key under "annotation.", where Docker labels hold CRI annotations: it would come back
//     as an annotation.
//
// Annotations need no check: they are stored under "annotation." and never meet our keys.
func checkCRILabels(what string, labels map[string]string) error {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch {
		case k == "":
			return invalidf("%s labels: a label has an empty key", what)
		case internalLabels[k], strings.HasPrefix(k, ourLabelPrefix):
			return invalidf("%s label %q: the key is reserved for cri-dockerd's own labels on Docker objects", what, k)
		case strings.HasPrefix(k, annotationPrefix):
			return invalidf("%s label %q: keys starting with %q hold CRI annotations on Docker objects; the label would come back as an annotation", what, k, annotationPrefix)
		}
	}
	return nil
}

// nameComponent is what may stand between the delimiters of a Docker name: Docker allows
// [a-zA-Z0-9_.-] and the delimiter is "_".
var nameComponent = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9.-]*$`)

const maxNameComponent = 253

// checkNameComponent says why value cannot be part of a Docker object name, or returns nil.
func checkNameComponent(what, value string, required bool) error {
	if value == "" {
		if required {
			return invalidf("%s is required", what)
		}
		return nil
	}
	if len(value) > maxNameComponent {
		return invalidf("%s is %d characters long; at most %d are allowed", what, len(value), maxNameComponent)
	}
	if !nameComponent.MatchString(value) {
		return invalidf("%s %q: only letters, digits, '.' and '-' are allowed, starting with a letter or digit", what, value)
	}
	return nil
}

func makeSandboxName(m *runtimeapi.PodSandboxMetadata) string {
	return strings.Join([]string{namePrefix, sandboxContainerName, m.Name, m.Namespace, m.Uid, strconv.FormatUint(uint64(m.Attempt), 10)}, nameDelimiter)
}

func makeContainerName(s *runtimeapi.PodSandboxMetadata, c *runtimeapi.ContainerMetadata) string {
	return strings.Join([]string{namePrefix, c.Name, s.Name, s.Namespace, s.Uid, strconv.FormatUint(uint64(c.Attempt), 10)}, nameDelimiter)
}

// randomizeName adds a random suffix, as upstream does when a name is already taken (for
// example by a container Docker could not remove yet); parseName ignores the suffix.
func randomizeName(name string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return name + nameDelimiter + hex.EncodeToString(b)
}

// parsedName is what a Docker object name says about its pod and container.
type parsedName struct {
	container string
	pod       string
	namespace string
	uid       string
	attempt   uint32
}

func parseName(dockerName string) (parsedName, error) {
	parts := strings.Split(strings.TrimPrefix(dockerName, "/"), nameDelimiter)
	if len(parts) != 6 && len(parts) != 7 || parts[0] != namePrefix {
		return parsedName{}, fmt.Errorf("%q is not a cri-dockerd container name", dockerName)
	}
	attempt, err := strconv.ParseUint(parts[5], 10, 32)
	if err != nil {
		return parsedName{}, fmt.Errorf("%q: attempt %q is not a number", dockerName, parts[5])
	}
	return parsedName{container: parts[1], pod: parts[2], namespace: parts[3], uid: parts[4], attempt: uint32(attempt)}, nil
}

func (p parsedName) sandboxMetadata() *runtimeapi.PodSandboxMetadata {
	return &runtimeapi.PodSandboxMetadata{Name: p.pod, Namespace: p.namespace, Uid: p.uid, Attempt: p.attempt}
}

func (p parsedName) containerMetadata() *runtimeapi.ContainerMetadata {
	return &runtimeapi.ContainerMetadata{Name: p.container, Attempt: p.attempt}
}

// makeLabels merges CRI labels and annotations into Docker labels, as upstream does, and
// records which keys they are.
func makeLabels(labels, annotations map[string]string) map[string]string {
	out := make(map[string]string, len(labels)+len(annotations)+len(readBackLabels))
	keys := make([]string, 0, len(labels)+len(annotations))
	for k, v := range labels {
		if internalLabels[k] || strings.HasPrefix(k, ourLabelPrefix) || strings.HasPrefix(k, annotationPrefix) {
			continue // refused by checkCRILabels; dropped here should a caller not check
		}
		out[k] = v
		keys = append(keys, k)
	}
	for k, v := range annotations {
		out[annotationPrefix+k] = v
		keys = append(keys, annotationPrefix+k)
	}
	sort.Strings(keys)
	raw, _ := json.Marshal(keys)
	out[criKeysLabel] = string(raw)
	return out
}

// splitLabels is the inverse of makeLabels: it returns the CRI labels and annotations of a
// Docker object, without labels of ours or of the image. Objects made by upstream cri-dockerd
// carry no key list: all their labels but the internal ones count.
func splitLabels(dockerLabels map[string]string) (labels, annotations map[string]string) {
	labels = map[string]string{}
	annotations = map[string]string{}
	var criKeys map[string]bool
	if raw, ok := dockerLabels[criKeysLabel]; ok {
		criKeys = criKeySets.get(raw)
	}
	for k, v := range dockerLabels {
		switch {
		case criKeys != nil && !criKeys[k]:
		case internalLabels[k], strings.HasPrefix(k, ourLabelPrefix):
		case strings.HasPrefix(k, annotationPrefix):
			annotations[strings.TrimPrefix(k, annotationPrefix)] = v
		default:
			labels[k] = v
		}
	}
	return labels, annotations
}

// keySetCache holds parsed criKeysLabel values (read-only sets). The kubelet's relists split
// the labels of every object every second, and the pods of one workload share one key list:
// the JSON is decoded once per distinct list, not once per object and call.
type keySetCache struct {
	mu   sync.Mutex
	sets map[string]map[string]bool
}

// keySetCacheMax bounds the cache; it starts over when full.
const keySetCacheMax = 4096

var criKeySets = &keySetCache{}

// get returns the set of keys of raw, a JSON list; nil when raw is not one (then every label
// is the request's, as for containers made before the list existed).
func (c *keySetCache) get(raw string) map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if set, ok := c.sets[raw]; ok {
		return set
	}
	var keys []string
	var set map[string]bool
	if json.Unmarshal([]byte(raw), &keys) == nil {
		set = make(map[string]bool, len(keys))
		for _, k := range keys {
			set[k] = true
		}
	}
	if c.sets == nil || len(c.sets) >= keySetCacheMax {
		c.sets = map[string]map[string]bool{}
	}
	c.sets[raw] = set
	return set
}

// matchesSelector reports whether labels hold every key=value of selector.
func matchesSelector(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// listed is a Docker container of ours with what its name says.
type listed struct {
	container.Summary
	name parsedName
}

// listCRIContainers lists the containers (not sandboxes) whose ID starts with idPrefix, of pod
// sandboxID when it is set, that carry every label of selector: the filter of ListContainers
// and of ListContainerStats.
func (s *Service) listCRIContainers(ctx context.Context, idPrefix, sandboxID string, selector map[string]string) ([]listed, error) {
	var extra []string
	if sandboxID != "" {
		extra = append(extra, sandboxIDLabel+"="+sandboxID)
	}
	list, err := s.listOurs(ctx, containerTypeContainer, idPrefix, selector, extra...)
	if err != nil {
		return nil, dockerError(err, "list containers")
	}
	return list, nil
}

// listOurs lists, in one Docker call, the containers of one kind (sandbox or container) whose
// ID starts with idPrefix and that carry every label of selector and of extra. Docker's id
// filter matches anywhere in the ID, so the prefix is checked again here.
func (s *Service) listOurs(ctx context.Context, kind, idPrefix string, selector map[string]string, extra ...string) ([]listed, error) {
	args := libdocker.LabelFilter(append([]string{containerTypeLabel + "=" + kind}, extra...)...)
	for k, v := range selector {
		args.Add("label", k+"="+v)
	}
	if idPrefix != "" {
		args.Add("id", idPrefix)
	}
	list, err := s.docker.ListContainers(ctx, container.ListOptions{All: true, Filters: args})
	if err != nil {
		return nil, err
	}
	out := make([]listed, 0, len(list))
	for _, c := range list {
		if len(c.Names) == 0 || !strings.HasPrefix(c.ID, idPrefix) {
			continue
		}
		name, err := parseName(c.Names[0])
		if err != nil {
			s.log.Debugf("skipping %s %s: %v", kind, c.ID, err)
			continue
		}
		out = append(out, listed{Summary: c, name: name})
	}
	return out, nil
}
