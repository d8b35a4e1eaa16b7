package containerlog

import (
	"bufio"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// A terminal's log line is cut into messages only where its whole stamp and the space after it
// come again (Docker's parts of a line of 16 KiB or more): output that merely holds the stamp's
// digits stays in its message.
func TestTerminalLineIsCutOnlyAtItsWholeStamp(t *testing.T) {
	const stamp = "2026-12-01T10:00:00.5Z"
	stream := stamp + " said 2026-12-01T10:00:00.5 at noon\n" + stamp + " part1" + stamp + " part2\n"
	f := &follower{tty: true}
	r := &messageReader{Reader: bufio.NewReader(strings.NewReader(stream))}
	var got []string
	for {
		name, msg, err := f.next(r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if name != "stdout" {
			t.Errorf("a terminal's message on %q, want stdout", name)
		}
		got = append(got, string(msg))
	}
	want := []string{stamp + " said 2026-12-01T10:00:00.5 at noon\n", stamp + " part1", stamp + " part2\n"}
	if !slices.Equal(got, want) {
		t.Errorf("messages %q, want %q", got, want)
	}
}
