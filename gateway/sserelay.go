package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// localReservation holds a proxied request's *reservation.
const localReservation = "specgate.reservation"

// maxSSEEvent bounds one upstream stream event (all its lines together).
const maxSSEEvent = 8 << 20

// relayResult is what relaySSE saw.
type relayResult struct {
	events     int    // data events other than [DONE]
	done       bool   // the upstream sent data: [DONE]
	usage      *Usage // the last usage object seen in a data event
	clientGone bool   // a write to the client failed
	err        error  // the read error that ended the relay (nil: clean EOF)
}

// relaySSE copies an upstream Server-Sent Events body to the client one
// whole event at a time (an event ends at a blank line), flushing each, so
// that a stream cut in the middle of an event never leaves half an event
// for an error event to be glued to. It records [DONE], usage and the
// reason the relay ended. A partial event at the end is dropped. tee, when
// not nil, gets every data payload but [DONE] (valid during the call only);
// without it nothing is parsed but a usage object.
func relaySSE(w *bufio.Writer, r io.Reader, tee func(data []byte)) relayResult {
	var res relayResult
	br := bufio.NewReaderSize(r, 64<<10)
	var ev []byte
	for {
		line, err := br.ReadSlice('\n')
		ev = append(ev, line...)
		// Bounded after every append: an event grows by long lines (the
		// reader's buffer overflowing) and by many short lines alike.
		if len(ev) > maxSSEEvent {
			res.err = fmt.Errorf("stream event exceeds %d bytes", maxSSEEvent)
			return res
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil && len(bytes.TrimRight(line, "\r\n")) == 0 {
			if len(bytes.TrimSpace(ev)) > 0 {
				res.inspect(ev, tee)
				if _, werr := w.Write(ev); werr != nil {
					res.clientGone = true
					return res
				}
				if werr := w.Flush(); werr != nil {
					res.clientGone = true
					return res
				}
			}
			ev = ev[:0]
			continue
		}
		if err == io.EOF {
			return res
		}
		if err != nil {
			res.err = err
			return res
		}
	}
}

// inspect reads the data lines of one event.
func (res *relayResult) inspect(ev []byte, tee func([]byte)) {
	for _, line := range bytes.Split(ev, []byte("\n")) {
		data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			res.done = true
			continue
		}
		res.events++
		if tee != nil {
			tee(data)
		}
		if bytes.Contains(data, []byte(`"usage"`)) {
			var u struct {
				Usage *Usage `json:"usage"`
			}
			if json.Unmarshal(data, &u) == nil && u.Usage != nil {
				res.usage = u.Usage
			}
		}
	}
}
