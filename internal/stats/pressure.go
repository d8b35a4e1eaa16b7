package stats

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Pressure is one of a cgroup v2's *.pressure files (PSI): how long some, or all, of the
// cgroup's tasks waited for the resource.
type Pressure struct {
	Some, Full PressureLine
}

// PressureLine is one line of a pressure file: the averages in percent over 10, 60 and 300 s,
// and the total wait in microseconds, as the kernel gives it.
type PressureLine struct {
	Avg10, Avg60, Avg300 float64
	TotalMicros          uint64
}

// PSI is a container's pressure of CPU, memory and I/O; a nil field is a file the kernel does
// not have (PSI off: psi=0 on its command line, or no CONFIG_PSI).
type PSI struct {
	CPU, Memory, IO *Pressure
}

// readCgroupV2PSI reads the pressure files of a cgroup v2 directory; nil when it has none.
func readCgroupV2PSI(dir string) *PSI {
	p := &PSI{
		CPU:    readPressure(filepath.Join(dir, "cpu.pressure")),
		Memory: readPressure(filepath.Join(dir, "memory.pressure")),
		IO:     readPressure(filepath.Join(dir, "io.pressure")),
	}
	if p.CPU == nil && p.Memory == nil && p.IO == nil {
		return nil
	}
	return p
}

// readPressure parses "some avg10=0.00 avg60=0.00 avg300=0.00 total=0" and its "full" line
// (cpu.pressure has one from Linux 5.13; before, Full stays zero). nil when the file cannot be
// read or has no "some" line.
func readPressure(path string) *Pressure {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var p Pressure
	var some bool
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var l *PressureLine
		switch f[0] {
		case "some":
			l, some = &p.Some, true
		case "full":
			l = &p.Full
		default:
			continue
		}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "avg10":
				l.Avg10, _ = strconv.ParseFloat(v, 64)
			case "avg60":
				l.Avg60, _ = strconv.ParseFloat(v, 64)
			case "avg300":
				l.Avg300, _ = strconv.ParseFloat(v, 64)
			case "total":
				l.TotalMicros, _ = strconv.ParseUint(v, 10, 64)
			}
		}
	}
	if !some {
		return nil
	}
	return &p
}
