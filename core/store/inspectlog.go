package store

import (
	"bytes"
	"fmt"
	"slices"
)

// applyLog applies to rep.Records the frames of the write-ahead log beside rep.Path
// that the file does not hold: what a store that stopped without a checkpoint (a crash,
// a power cut) acknowledged last, which Open would replay and Salvage must not lose.
// On a file whose meta bucket is sound this is exactly Open's replay, and a log that
// Open would refuse is a problem of the report. On a damaged one the checkpoint is
// unknown, so every intact frame is applied in order: an older write applied again can
// only bring back a record that was deleted, an address held too long, which is the
// safe side (as with Report.Recovered).
func applyLog(rep *Report) {
	frames, err := logFrames(rep)
	if err != nil {
		rep.Problems = append(rep.Problems, err.Error())
		return
	}
	if len(frames) == 0 {
		return
	}
	recs := make(map[string]Record, len(rep.Records))
	for _, r := range rep.Records {
		recs[string(ownerKey(r.Owner))] = r
	}
	for _, f := range frames {
		for _, o := range f.ops {
			switch o.kind {
			case walDelete:
				delete(recs, string(o.key))
			case walPut:
				r, err := decodeRecord(o.key, o.value)
				if err != nil {
					rep.Problems = append(rep.Problems, fmt.Sprintf("write-ahead log frame %d: %v", f.seq, err))
					rep.Lost = append(rep.Lost, Loss{Key: keyName(o.key), Reason: err.Error()})
					continue
				}
				recs[string(o.key)] = r
			}
		}
	}
	rep.Records = rep.Records[:0]
	for _, r := range recs {
		rep.Records = append(rep.Records, r)
	}
	slices.SortFunc(rep.Records, func(a, b Record) int { return bytes.Compare(ownerKey(a.Owner), ownerKey(b.Owner)) })
	rep.Logged = len(frames)
}

// logFrames returns the frames to apply for rep (see applyLog).
func logFrames(rep *Report) ([]walFrame, error) {
	paths := WALPaths(rep.Path)
	if rep.walIDKnown && rep.walSeqReadable {
		return readWAL(paths, rep.walID, rep.walSeq)
	}
	scans, err := scanWAL(paths, nil)
	if err != nil {
		return nil, err
	}
	var frames []walFrame
	for _, sc := range scans {
		frames = append(frames, sc.run...)
	}
	slices.SortStableFunc(frames, func(a, b walFrame) int { return cmpUint(a.seq, b.seq) })
	return frames, nil
}
