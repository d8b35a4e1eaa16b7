package containerlog

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"slices"
)

// DefaultMaxLineSize is the longest text of one CRI log line, as containerd's default
// max_container_log_line_size: a longer line becomes several partial (P) lines. Whatever a
// container writes, a follower holds at most this much of it (and Docker's stream buffer).
const DefaultMaxLineSize = 16 << 10

// streamBufferSize is the read buffer of a container's log stream from Docker. Each followed
// container holds one while it runs, quiet or not, so it is small.
const streamBufferSize = 4 << 10

// maxStampSize bounds the timestamp before each message ("2006-01-02T15:04:05.999999999Z"
// and the space after it, or an offset instead of Z).
const maxStampSize = 64

// messageReader reads Docker's log stream (timestamps on) as messages "STAMP TEXT" of at
// most max bytes of text each. Docker cuts a line at 16 KiB into parts of its own, each a
// message; a longer message (a terminal's line that never ends, or a smaller max) is cut
// here at max bytes, and each piece goes on with its message's stamp. A piece ends with the
// line's newline only if it holds it: so a cut line becomes P lines and one F line. Where the
// stream is cut depends only on its bytes, never on when they arrive: a follower that reads
// the same stream again (after a restart) gets the same pieces, which its position counts.
type messageReader struct {
	r   *bufio.Reader
	tty bool
	max int
	// msg is the message returned last, its buffer reused by the next.
	msg []byte
	// The message being read, when it goes on in the next piece: its stream and the stamp
	// with its space (also the separator of a terminal's parts), and for a multiplexed
	// stream, what is left of its frame.
	cont   bool
	stream string
	// piece says the message returned last is a piece of a longer one, cut here.
	piece bool
	stamp []byte
	left  int
}

func newMessageReader(stream io.Reader, tty bool, max int) *messageReader {
	if max <= 0 {
		max = DefaultMaxLineSize
	}
	return &messageReader{r: bufio.NewReaderSize(stream, streamBufferSize), tty: tty, max: max}
}

// Whole says the message returned last is all of Docker's message, not a piece cut here.
func (r *messageReader) Whole() bool { return !r.piece }

// Buffered is how much of the stream has arrived but is not read yet.
func (r *messageReader) Buffered() int { return r.r.Buffered() }

// next returns the next message and the name of the stream it came on. The message is valid
// until the next call. Bytes that do not begin with a stamp come as a message that holds no
// valid one, for the caller to skip.
func (r *messageReader) next() (string, []byte, error) {
	if r.tty {
		return r.nextTerminal()
	}
	return r.nextFrame()
}

// nextFrame reads a multiplexed stream: frames of an 8-byte header (the stream, the length)
// and a message.
func (r *messageReader) nextFrame() (string, []byte, error) {
	r.piece = r.cont
	for !r.cont {
		var header [8]byte
		if _, err := io.ReadFull(r.r, header[:]); err != nil {
			return "", nil, err
		}
		r.left = int(binary.BigEndian.Uint32(header[4:]))
		r.stream = "stdout"
		if header[0] == 2 {
			r.stream = "stderr"
		}
		p, err := r.r.Peek(min(r.left, maxStampSize))
		if err != nil {
			return "", nil, unexpected(err)
		}
		i := bytes.IndexByte(p, ' ')
		if i < 0 {
			// No stamp: not a message of Docker's; skip the frame.
			if _, err := r.r.Discard(r.left); err != nil {
				return "", nil, unexpected(err)
			}
			continue
		}
		r.stamp = append(r.stamp[:0], p[:i+1]...)
		r.r.Discard(i + 1) // peeked
		r.left -= i + 1
		r.cont = true
	}
	n := min(r.left, r.max)
	r.msg = slices.Grow(r.msg[:0], len(r.stamp)+n)[:len(r.stamp)+n]
	copy(r.msg, r.stamp)
	if _, err := io.ReadFull(r.r, r.msg[len(r.stamp):]); err != nil {
		return "", nil, unexpected(err)
	}
	r.left -= n
	r.cont = r.left > 0
	r.piece = r.piece || r.cont
	return r.stream, r.msg, nil
}

// nextTerminal reads a terminal's stream, which is not multiplexed: one message per line,
// but for a line of 16 KiB or more, which Docker splits into parts that it sends back to back,
// each after the same stamp ("T part1T part2T part3\n"). So a message ends at a newline or
// where its whole stamp and the space after it come again.
func (r *messageReader) nextTerminal() (string, []byte, error) {
	if r.cont {
		// A cut message goes on, unless its next part begins right here.
		if p, _ := r.r.Peek(len(r.stamp)); bytes.Equal(p, r.stamp) {
			r.cont = false
		}
	}
	if !r.cont {
		tok, err := r.r.ReadSlice(' ')
		if err != nil {
			// The end of the stream, or no space in a buffer's worth: skip it.
			if err == bufio.ErrBufferFull {
				r.msg = append(r.msg[:0], tok...)
				return "stdout", r.msg, nil
			}
			return "", nil, err
		}
		if len(tok) > maxStampSize {
			// Not a stamp: the message holds no valid one and is skipped.
			r.msg = append(r.msg[:0], tok...)
			return "stdout", r.msg, nil
		}
		r.stamp = append(r.stamp[:0], tok...)
	}
	r.piece = r.cont
	r.cont = false
	r.msg = append(r.msg[:0], r.stamp...)
	text := 0
	for {
		if r.r.Buffered() == 0 {
			if _, err := r.r.Peek(1); err != nil {
				return r.ended(text, err)
			}
		}
		p, _ := r.r.Peek(r.r.Buffered())
		room := r.max - text
		end := -1
		if k := bytes.IndexByte(p, '\n'); k >= 0 && k < room {
			end = k + 1 // the line's text and its newline
		}
		if s := bytes.Index(p, r.stamp); s >= 0 && s <= room && (end < 0 || s < end) {
			end = s // the next part of the line
		}
		if end >= 0 {
			r.msg = append(r.msg, p[:end]...)
			r.r.Discard(end) // peeked
			return "stdout", r.msg, nil
		}
		// Keep back what may be the beginning of the next part's stamp.
		n := min(len(p)-(len(r.stamp)-1), room)
		if n <= 0 {
			if _, err := r.r.Peek(len(p) + 1); err == nil {
				continue
			}
			// The stream ended: no stamp follows, what is left is text. (Peek may have moved
			// the buffered bytes.)
			p, _ = r.r.Peek(r.r.Buffered())
			n = min(len(p), room)
		}
		r.msg = append(r.msg, p[:n]...)
		r.r.Discard(n) // peeked
		if text += n; text == r.max {
			r.cont, r.piece = true, true
			return "stdout", r.msg, nil
		}
	}
}

// ended returns what a terminal's message holds when the stream ended under it, or err when
// it holds nothing.
func (r *messageReader) ended(text int, err error) (string, []byte, error) {
	if text == 0 {
		return "", nil, err
	}
	return "stdout", r.msg, nil
}

// unexpected is err inside a frame, where the stream may not end.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
