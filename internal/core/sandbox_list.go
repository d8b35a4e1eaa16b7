package core

import (
	"context"
	"strings"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandbox lists sandboxes from one Docker list call, filtered by id (prefix), state and
// labels. Sandboxes whose container is gone but whose containers or checkpoint are left are
// listed NOTREADY (sandbox_gone.go). While the store answers lists, the whole list is built
// once per change and filtered (list_cache.go).
func (s *Service) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	resp, err := s.listPodSandboxKept(ctx, req)
	if err != nil || !s.nriPending.any() {
		return resp, err
	}
	return &runtimeapi.ListPodSandboxResponse{Items: withoutPending(&s.nriPending, resp.Items, (*runtimeapi.PodSandbox).GetId)}, nil
}

func (s *Service) listPodSandboxKept(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := req.GetFilter()
	all, kept, err := keptList(s, &s.sandboxList, func() (*runtimeapi.ListPodSandboxResponse, error) { return s.listPodSandbox(ctx, nil) })
	if !kept {
		return s.listPodSandbox(ctx, f)
	}
	if err != nil || f == nil || proto.Equal(f, &runtimeapi.PodSandboxFilter{}) {
		return all, err
	}
	out := make([]*runtimeapi.PodSandbox, 0, len(all.Items))
	for _, sb := range all.Items {
		if sandboxMatches(sb, f) {
			out = append(out, sb)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

// sandboxMatches reports whether sb passes filter f.
func sandboxMatches(sb *runtimeapi.PodSandbox, f *runtimeapi.PodSandboxFilter) bool {
	return strings.HasPrefix(sb.Id, f.GetId()) &&
		(f.GetState() == nil || f.GetState().State == sb.State) &&
		matchesSelector(sb.Labels, f.GetLabelSelector())
}

func (s *Service) listPodSandbox(ctx context.Context, f *runtimeapi.PodSandboxFilter) (*runtimeapi.ListPodSandboxResponse, error) {
	// Known before the list: what Docker does not list then is gone, not being created.
	known := s.sandboxes.ids()
	all, err := s.listAllOurs(ctx)
	if err != nil {
		return nil, dockerError(err, "list pod sandboxes")
	}
	keep := func(sb *runtimeapi.PodSandbox) bool { return sandboxMatches(sb, f) }
	present := map[string]bool{}
	out := make([]*runtimeapi.PodSandbox, 0, len(all))
	for _, c := range all {
		if c.Labels[containerTypeLabel] != containerTypeSandbox {
			continue
		}
		present[c.ID] = true
		rec, ok := recordFromSummary(c)
		if !ok {
			s.log.Debugf("skipping %s %s: %q is not a cri-dockerd container name", containerTypeSandbox, c.ID, c.Names)
			continue
		}
		s.sandboxes.remember(c.ID, rec)
		sb := &runtimeapi.PodSandbox{
			Id:             c.ID,
			Metadata:       rec.metadata,
			State:          runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
			CreatedAt:      rec.createdAt,
			Labels:         rec.labels,
			Annotations:    rec.annotations,
			RuntimeHandler: rec.handler,
		}
		if c.State == "running" {
			sb.State = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		if keep(sb) {
			out = append(out, sb)
		}
	}
	gone := s.collectGone(all, present, "")
	var left []string
	for _, id := range known {
		if !present[id] && gone[id] == nil {
			left = append(left, id)
		}
	}
	s.sandboxes.prune(left)
	for _, g := range gone {
		if sb := g.podSandbox(); keep(sb) {
			out = append(out, sb)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}
