package stats

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadPressure(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if readCgroupV2PSI(dir) != nil {
		t.Fatal("PSI from a cgroup without pressure files")
	}
	// Linux before 5.13: cpu.pressure has no full line.
	write("cpu.pressure", "some avg10=12.34 avg60=5.00 avg300=1.25 total=987654\n")
	write("memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n")
	write("io.pressure", "garbage\n")
	p := readCgroupV2PSI(dir)
	if p == nil || p.CPU == nil || p.Memory == nil {
		t.Fatalf("PSI %+v", p)
	}
	if want := (Pressure{Some: PressureLine{Avg10: 12.34, Avg60: 5, Avg300: 1.25, TotalMicros: 987654}}); *p.CPU != want {
		t.Errorf("cpu %+v, want %+v", *p.CPU, want)
	}
	if p.Memory.Full.TotalMicros != 5 || p.Memory.Some.TotalMicros != 10 {
		t.Errorf("memory %+v", *p.Memory)
	}
	if p.IO != nil {
		t.Errorf("io %+v from a file with no some line", *p.IO)
	}
}
