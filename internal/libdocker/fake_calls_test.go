package libdocker

import (
	"context"
	"errors"
	"testing"
)

func TestInjectError(t *testing.T) {
	ctx := context.Background()
	f := newTestFake(t)
	f.InjectError("Ping", errors.New("boom"))
	if err := f.Ping(ctx); err == nil {
		t.Fatal("injected error not returned")
	}
	if err := f.Ping(ctx); err != nil {
		t.Fatalf("one-shot error used twice: %v", err)
	}
	f.InjectPersistentError("StartContainer", errors.New("failed to create shim task: OCI runtime create failed: x"))
	for range 2 {
		if err := f.StartContainer(ctx, "whatever"); !errors.Is(err, ErrRuntimeFailed) {
			t.Fatalf("persistent error not classified: %v", err)
		}
	}
	f.InjectPersistentError("StartContainer", nil)
	if err := f.StartContainer(ctx, "whatever"); !IsNotFound(err) {
		t.Fatalf("cleared error: %v", err)
	}
	if got := f.Calls("StartContainer"); got != 3 {
		t.Errorf("Calls = %d, want 3", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("misspelt method name accepted")
		}
	}()
	f.InjectError("StartContainers", errors.New("x"))
}
