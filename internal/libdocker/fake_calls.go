package libdocker

import (
	"context"
	"fmt"
	"reflect"
)

// InjectError makes the next call of method (a Client method name, e.g. "StartContainer")
// fail with err, without side effects. Errors queue, each is used once; the error goes through
// the same classification as the real client's. It panics on a name that is not a Client method.
func (f *Fake) InjectError(method string, err error) {
	checkMethod(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onceErrs[method] = append(f.onceErrs[method], err)
}

// InjectPersistentError makes every call of method fail with err until it is called again
// with a nil err. One-shot errors from InjectError are used first.
func (f *Fake) InjectPersistentError(method string, err error) {
	checkMethod(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.persistErrs, method)
		return
	}
	f.persistErrs[method] = err
}

// OnCall runs fn at the start of every call of method, before the call looks at its context:
// a test cancels the caller's context there to stand for a deadline that expires while Docker
// works. fn runs with the Fake's lock held and must not call the Fake; a nil fn removes it.
func (f *Fake) OnCall(method string, fn func()) {
	checkMethod(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	if fn == nil {
		delete(f.hooks, method)
		return
	}
	f.hooks[method] = fn
}

// AfterCall runs fn once a call of method has done its work, before it answers: a test cancels
// the caller's context there to stand for a caller that gave up while Docker finished. The call
// then answers the context's error, as the real client does, though Docker did the work. Only
// CreateContainer and StartContainer run it. fn runs with the Fake's lock held and must not
// call the Fake; a nil fn removes it.
func (f *Fake) AfterCall(method string, fn func()) {
	checkMethod(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	if fn == nil {
		delete(f.afterHooks, method)
		return
	}
	f.afterHooks[method] = fn
}

// leave runs method's AfterCall hook and answers ctx's error if the caller has gone by then;
// f.mu must be held.
func (f *Fake) leave(ctx context.Context, method string) error {
	if fn := f.afterHooks[method]; fn != nil {
		fn()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

// Calls returns how many times method was called, failed calls included.
func (f *Fake) Calls(method string) int {
	checkMethod(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// InfoCalls returns how many times Info was called; callers are expected to cache it.
func (f *Fake) InfoCalls() int { return f.Calls("Info") }

// ResetCalls zeroes all call counters, e.g. after a test's setup phase.
func (f *Fake) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.calls)
}

func checkMethod(method string) {
	if _, ok := reflect.TypeFor[Client]().MethodByName(method); !ok {
		panic(fmt.Sprintf("libdocker.Fake: %q is not a Client method", method))
	}
}

// enter does what every Engine call has in common; f.mu must be held.
func (f *Fake) enter(ctx context.Context, method string) error {
	f.calls[method]++
	if fn := f.hooks[method]; fn != nil {
		fn()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	f.negotiated = true
	if q := f.onceErrs[method]; len(q) > 0 {
		f.onceErrs[method] = q[1:]
		return classify(q[0])
	}
	return classify(f.persistErrs[method])
}
