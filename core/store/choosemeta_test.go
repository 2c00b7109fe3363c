package store

import (
	"errors"
	"testing"
)

func TestChooseMeta(t *testing.T) {
	old := boltMeta{pageSize: 4096, txn: 7, pgid: 10}
	cur := boltMeta{pageSize: 4096, txn: 8, pgid: 11}
	big := boltMeta{pageSize: 8192, txn: 9, pgid: 12}
	bad := errors.New("bad")
	for _, tc := range []struct {
		name        string
		m0          boltMeta
		err0        error
		m1          boltMeta
		err1        error
		want        boltMeta
		disagreeing bool
	}{
		{"the newer transaction", old, nil, cur, nil, cur, false},
		{"the newer transaction, page 0", cur, nil, old, nil, cur, false},
		{"page 0 alone", old, nil, cur, bad, old, false},
		{"page 1 alone", old, bad, cur, nil, cur, false},
		{"neither", old, bad, cur, bad, boltMeta{}, false},
		{"page sizes disagree", cur, nil, big, nil, big, true},
	} {
		got, problem := chooseMeta(tc.m0, tc.err0, tc.m1, tc.err1)
		if got != tc.want || (problem != "") != tc.disagreeing {
			t.Errorf("%s: chooseMeta = %+v, %q; want %+v, a problem: %v", tc.name, got, problem, tc.want, tc.disagreeing)
		}
	}
}
