package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// A defensive reader of bbolt's file format.
//
// bbolt trusts its file: it reads pages through mmap and follows page numbers and
// offsets without bounds checks, so a truncated file faults (SIGBUS past the end of the
// file) and a scribbled page makes it index out of range. Some of that happens in
// goroutines bbolt starts itself (the free-page scan at Open when the freelist is not
// synced), where no recover of ours can reach. So before bbolt sees a file, Open walks
// it with this reader, which reads with pread and checks every number against the file
// and the page before it uses it; bbolt only gets a file whose every reachable page was
// found well-formed. The same walk is `allotd store check` and the source of salvage,
// which copies every record it can still read and names the ones it cannot.
//
// The format (bbolt's internal/common, stable since format version 2): pages of
// PageSize bytes; page 0 and 1 are meta pages (the one with the higher valid txid is
// current); every page starts with a 16-byte header (id, flags, count, overflow);
// branch pages hold 16-byte elements (pos, ksize, pgid), leaf pages 16-byte elements
// (flags, pos, ksize, vsize), pos counting from the element itself. A bucket is a leaf
// value with the bucket flag: a 16-byte header (root pgid, sequence), followed by an
// inline page when root is 0.

const (
	boltMagic          = 0xED0CDAED
	boltVersion        = 2
	pageHeaderSize     = 16
	elemSize           = 16 // branch and leaf elements alike
	metaSize           = 64
	bucketHeaderSize   = 16
	branchPageFlag     = 0x01
	leafPageFlag       = 0x02
	metaPageFlag       = 0x04
	freelistPageFlag   = 0x10
	bucketLeafFlag     = 0x01
	noFreelist         = ^uint64(0)
	minPageSize        = 1 << 10
	maxPageSize        = 1 << 20
	maxRecordKeyLength = maxContainerIDLen + 1 + maxIfNameLen
)

// Loss is something a store file held that could not be read back.
type Loss struct {
	// Key is the owner (containerID/ifname) of one unreadable record; empty when a
	// whole page (and the records under it) is lost.
	Key string
	// From and To bound the keys of a lost page, as its parent page says: From
	// inclusive, To exclusive; empty means unbounded.
	From, To string
	// Page is the page that failed, 0 for a record whose page was fine.
	Page   uint64
	Reason string
}

func (l Loss) String() string {
	if l.Key != "" {
		return fmt.Sprintf("record %q: %s", l.Key, l.Reason)
	}
	from, to := "the first key", "the last"
	if l.From != "" {
		from = strconv.Quote(l.From)
	}
	if l.To != "" {
		to = "before " + strconv.Quote(l.To)
	}
	return fmt.Sprintf("page %d (records from %s to %s): %s", l.Page, from, to, l.Reason)
}

// Report is what Inspect found in a store file.
type Report struct {
	Path string
	Size int64
	// PageSize and TxID are those of the current meta page (zero if none is valid).
	PageSize int
	TxID     uint64
	// Pages counts the pages reached from the current meta page.
	Pages int
	// Foreign is set when the file is not an allot store at all (not bbolt, or
	// a bbolt database of another program); Problems says which.
	Foreign bool
	// Schema is the schema version in the meta bucket (0 if unreadable or absent).
	Schema int
	// Problems lists every damage found, each naming where; empty for a sound file.
	Problems []string
	// Records are the readable records, in key order (Inspect only; Open's check does
	// not decode them).
	Records []Record
	// Lost lists what could not be read: single records and whole pages.
	Lost []Loss
	// Recovered are records found by scanning every page of a damaged file for leaf
	// pages the tree no longer reaches (or reaches through damage), whose owners the
	// tree does not hold readably: records of lost pages, but maybe also records
	// deleted before the damage (free pages keep old copies). Salvage keeps them, as
	// holding an address too long is safe and handing it out twice is not.
	Recovered []Record
	// Fresh is set for a sound bbolt file with no buckets (a new store).
	Fresh bool
	// Logged counts the frames of the write-ahead log beside the file that the file did
	// not hold yet (writes acknowledged before the store last stopped without a
	// checkpoint); Inspect applies them to Records.
	Logged int

	// The log's id and checkpoint from the meta bucket, when readable.
	walID          [walIDSize]byte
	walIDKnown     bool
	walSeq         uint64
	walSeqReadable bool
}

// OK reports whether the file is a sound allot store (or a fresh bbolt file).
func (r *Report) OK() bool { return len(r.Problems) == 0 && !r.Foreign }

// Summary is the first problem and how many more there are, for one-line errors.
func (r *Report) Summary() string {
	if len(r.Problems) == 0 {
		return "no damage found"
	}
	s := r.Problems[0]
	if n := len(r.Problems) - 1; n > 0 {
		s += fmt.Sprintf(" (and %d more problems)", n)
	}
	return s
}

// walker reads a file defensively. Every page it returns has been checked against the
// file's size, the high-water mark of the current meta page and its own header.
type walker struct {
	r io.ReaderAt
	// data, when set, is the whole file mapped read-only: pages are slices of it
	// instead of reads, which makes the walk of a large file several times cheaper.
	data     []byte
	size     int64
	pageSize int
	hwm      uint64 // meta.pgid: pages at or above it are not part of the database
	seen     pageSet
	rep      *Report
	decode   bool // decode records (Inspect) or only check the structure (Open)
	// truncated is set once a page was found past the end of the file, so the report
	// says "truncated" once rather than once per page.
	truncated bool
}

// pageSet is a bitset of page numbers below the high-water mark (meta pages included):
// the pages the walk has reached, each of which must be reached once.
type pageSet []uint64

func newPageSet(hwm uint64) pageSet {
	s := make(pageSet, hwm/64+1)
	s.add(0)
	s.add(1)
	return s
}

func (s pageSet) has(id uint64) bool { return id/64 < uint64(len(s)) && s[id/64]&(1<<(id%64)) != 0 }

func (s pageSet) add(id uint64) {
	if id/64 < uint64(len(s)) {
		s[id/64] |= 1 << (id % 64)
	}
}

type boltMeta struct {
	pageSize                  uint32
	root, freelist, pgid, txn uint64
}

// parseMeta decodes and validates a meta page's body (the 64 bytes after the header).
func parseMeta(b []byte) (boltMeta, error) {
	if len(b) < metaSize {
		return boltMeta{}, errors.New("shorter than a meta page")
	}
	le := binary.LittleEndian
	if m := le.Uint32(b[0:]); m != boltMagic {
		return boltMeta{}, fmt.Errorf("no bbolt magic (found %#x)", m)
	}
	if v := le.Uint32(b[4:]); v != boltVersion {
		return boltMeta{}, fmt.Errorf("bbolt format version %d, not %d", v, boltVersion)
	}
	h := fnv.New64a()
	_, _ = h.Write(b[:56])
	if sum := le.Uint64(b[56:]); sum != h.Sum64() {
		return boltMeta{}, errors.New("checksum mismatch")
	}
	m := boltMeta{
		pageSize: le.Uint32(b[8:]),
		root:     le.Uint64(b[16:]),
		freelist: le.Uint64(b[32:]),
		pgid:     le.Uint64(b[40:]),
		txn:      le.Uint64(b[48:]),
	}
	if m.pageSize < minPageSize || m.pageSize > maxPageSize || m.pageSize&(m.pageSize-1) != 0 {
		return boltMeta{}, fmt.Errorf("page size %d is not a power of two in [%d, %d]", m.pageSize, minPageSize, maxPageSize)
	}
	if m.pgid < 3 || m.root < 2 || m.root >= m.pgid || (m.freelist != noFreelist && (m.freelist < 2 || m.freelist >= m.pgid)) {
		return boltMeta{}, fmt.Errorf("page numbers out of range (root %d, freelist %d, high-water mark %d)", m.root, m.freelist, m.pgid)
	}
	return m, nil
}

// readMetas finds the current meta page as bbolt does: the valid one with the higher
// transaction ID. Meta page 1 sits one page in, so when page 0 is unreadable the usual
// page sizes are tried for it.
func readMetas(r io.ReaderAt, size int64) (boltMeta, []string, bool) {
	var problems []string
	mr := metaReader{r: r, size: size, buf: make([]byte, pageHeaderSize+metaSize)}
	// The magic alone tells a damaged bbolt file from something else entirely.
	magicSeen := false
	if size >= pageHeaderSize+4 {
		b := make([]byte, 4)
		if _, err := r.ReadAt(b, pageHeaderSize); err == nil {
			magicSeen = binary.LittleEndian.Uint32(b) == boltMagic
		}
	}
	m0body, err := mr.read(0)
	var m0 boltMeta
	if err == nil {
		m0, err = parseMeta(m0body)
	}
	if err != nil {
		problems = append(problems, "meta page 0: "+err.Error())
	}
	sizes := []int64{int64(os.Getpagesize()), 4096, 8192, 16384, 32768, 65536}
	if err == nil {
		sizes = []int64{int64(m0.pageSize)}
	}
	m1, magic1, err1 := mr.meta1(sizes)
	magicSeen = magicSeen || magic1
	if err1 != nil {
		problems = append(problems, "meta page 1: "+err1.Error())
	}
	m, problem := chooseMeta(m0, err, m1, err1)
	if problem != "" {
		problems = append(problems, problem)
	}
	return m, problems, magicSeen
}

// metaReader reads meta pages of a file of size bytes into buf.
type metaReader struct {
	r    io.ReaderAt
	size int64
	buf  []byte
}

// read returns the body of the meta page at off.
func (mr metaReader) read(off int64) ([]byte, error) {
	if off+int64(len(mr.buf)) > mr.size {
		return nil, fmt.Errorf("file ends at byte %d", mr.size)
	}
	if _, err := mr.r.ReadAt(mr.buf, off); err != nil {
		return nil, err
	}
	if flags := binary.LittleEndian.Uint16(mr.buf[8:]); flags != metaPageFlag {
		return nil, fmt.Errorf("page flags %#x are not those of a meta page", flags)
	}
	return mr.buf[pageHeaderSize:], nil
}

// meta1 looks for meta page 1 one page in, for each of the page sizes, and tells whether a
// page it read carries the bbolt magic.
func (mr metaReader) meta1(sizes []int64) (boltMeta, bool, error) {
	var m1 boltMeta
	var err1 error = errors.New("not found")
	magicSeen := false
	for _, ps := range sizes {
		body, rerr := mr.read(ps)
		if rerr != nil {
			err1 = rerr
			continue
		}
		magicSeen = magicSeen || binary.LittleEndian.Uint32(body) == boltMagic
		if m1, err1 = parseMeta(body); err1 == nil && int64(m1.pageSize) == ps {
			break
		} else if err1 == nil {
			err1 = fmt.Errorf("page size %d does not match its position", m1.pageSize)
		}
	}
	return m1, magicSeen, err1
}

// chooseMeta picks the meta page bbolt would use of the two read (err0, err1: why one is
// unusable), and names a disagreement between them; the zero boltMeta when neither is usable.
func chooseMeta(m0 boltMeta, err0 error, m1 boltMeta, err1 error) (boltMeta, string) {
	switch {
	case err0 == nil && err1 == nil && m0.pageSize != m1.pageSize:
		return pickMeta(m0, m1), fmt.Sprintf("meta pages disagree on the page size (%d, %d)", m0.pageSize, m1.pageSize)
	case err0 == nil && err1 == nil:
		return pickMeta(m0, m1), ""
	case err0 == nil:
		return m0, ""
	case err1 == nil:
		return m1, ""
	}
	return boltMeta{}, ""
}

func pickMeta(a, b boltMeta) boltMeta {
	if b.txn > a.txn {
		return b
	}
	return a
}

// page reads page id (with its overflow pages) and checks its header: a branch or leaf
// page that is where its parent says and was not reached before.
func (w *walker) page(id uint64) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("page number %d outside the database (2..%d)", id, w.hwm-1)
	}
	if w.seen.has(id) {
		return nil, fmt.Errorf("page %d is referenced twice", id)
	}
	off := int64(id) * int64(w.pageSize)
	if off+int64(w.pageSize) > w.size {
		w.truncated = true
		return nil, fmt.Errorf("past the end of the file (byte %d of %d): the file is truncated", off, w.size)
	}
	var head []byte
	if w.data != nil {
		head = w.data[off : off+int64(w.pageSize)]
	} else {
		head = make([]byte, w.pageSize)
		if _, err := w.r.ReadAt(head, off); err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
	}
	le := binary.LittleEndian
	if got := le.Uint64(head); got != id {
		return nil, fmt.Errorf("header says page %d: not the page its parent meant", got)
	}
	flags := le.Uint16(head[8:])
	if flags != branchPageFlag && flags != leafPageFlag {
		return nil, fmt.Errorf("page type %#x is neither branch nor leaf", flags)
	}
	overflow := uint64(le.Uint32(head[12:]))
	if id+overflow >= w.hwm {
		return nil, fmt.Errorf("%d overflow pages run past the database's last page %d", overflow, w.hwm-1)
	}
	for i := uint64(0); i <= overflow; i++ {
		if w.seen.has(id + i) {
			return nil, fmt.Errorf("page %d is referenced twice", id+i)
		}
	}
	buf := head
	if overflow > 0 {
		end := off + int64(overflow+1)*int64(w.pageSize)
		if end > w.size {
			w.truncated = true
			return nil, fmt.Errorf("overflow pages past the end of the file (byte %d of %d): the file is truncated", end, w.size)
		}
		if w.data != nil {
			buf = w.data[off:end]
		} else {
			buf = make([]byte, end-off)
			if _, err := w.r.ReadAt(buf, off); err != nil {
				return nil, fmt.Errorf("read: %w", err)
			}
		}
	}
	for i := uint64(0); i <= overflow; i++ {
		w.seen.add(id + i)
	}
	w.rep.Pages += int(overflow + 1)
	return buf, nil
}

// entry is one element of a page: a branch's child or a leaf's key and value.
type entry struct {
	key, value []byte
	flags      uint32
	child      uint64
}

// elements parses the elements of a page (buf holds the whole page, overflow included)
// and checks that each lies inside it and that keys strictly increase within [lo, hi).
func elements(buf []byte, lo, hi []byte) ([]entry, error) {
	le := binary.LittleEndian
	flags := le.Uint16(buf[8:])
	count := int(le.Uint16(buf[10:]))
	if pageHeaderSize+count*elemSize > len(buf) {
		return nil, fmt.Errorf("%d elements do not fit in a page of %d bytes", count, len(buf))
	}
	out := make([]entry, 0, count)
	for i := range count {
		at := pageHeaderSize + i*elemSize
		e := buf[at : at+elemSize]
		var (
			pos, ksize, vsize uint64
			en                entry
		)
		if flags == branchPageFlag {
			pos, ksize, en.child = uint64(le.Uint32(e[0:])), uint64(le.Uint32(e[4:])), le.Uint64(e[8:])
		} else {
			en.flags, pos, ksize, vsize = le.Uint32(e[0:]), uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
		}
		start := uint64(at) + pos
		if pos < elemSize || start+ksize+vsize > uint64(len(buf)) {
			return nil, fmt.Errorf("element %d (key of %d bytes, value of %d at offset %d) runs outside the page", i, ksize, vsize, start)
		}
		en.key = buf[start : start+ksize]
		en.value = buf[start+ksize : start+ksize+vsize]
		if i > 0 && bytes.Compare(out[i-1].key, en.key) >= 0 {
			return nil, fmt.Errorf("element %d: keys out of order", i)
		}
		if (lo != nil && bytes.Compare(en.key, lo) < 0) || (hi != nil && bytes.Compare(en.key, hi) >= 0) {
			return nil, fmt.Errorf("element %d: key outside the range its parent gives", i)
		}
		out = append(out, en)
	}
	if count == 0 && flags == branchPageFlag {
		return nil, errors.New("branch page without elements")
	}
	return out, nil
}

// walkTree visits every leaf entry of the tree rooted at page root (or of the inline
// page) in key order. A bad page is reported through lost with the key range its
// parent gives it, and the walk goes on with its siblings.
func (w *walker) walkTree(root uint64, inline []byte, lo, hi []byte, leaf func(entry), lost func(page uint64, lo, hi []byte, why error)) {
	var buf []byte
	if root == 0 {
		if len(inline) < pageHeaderSize {
			lost(0, lo, hi, errors.New("inline bucket shorter than a page header"))
			return
		}
		// An inline page has no id of its own; check its type only.
		if f := binary.LittleEndian.Uint16(inline[8:]); f != leafPageFlag {
			lost(0, lo, hi, fmt.Errorf("inline page type %#x is not leaf", f))
			return
		}
		buf = inline
	} else {
		var err error
		if buf, err = w.page(root); err != nil {
			lost(root, lo, hi, err)
			return
		}
	}
	es, err := elements(buf, lo, hi)
	if err != nil {
		lost(root, lo, hi, err)
		return
	}
	if binary.LittleEndian.Uint16(buf[8:]) == leafPageFlag {
		for _, e := range es {
			leaf(e)
		}
		return
	}
	for i, e := range es {
		next := hi
		if i+1 < len(es) {
			next = es[i+1].key
		}
		w.walkTree(e.child, nil, e.key, next, leaf, lost)
	}
}

// bucket is a child bucket found in a leaf: its root page or inline page.
func bucketOf(e entry) (root uint64, inline []byte, err error) {
	if e.flags&bucketLeafFlag == 0 {
		return 0, nil, errors.New("a plain value where a bucket was expected")
	}
	if len(e.value) < bucketHeaderSize {
		return 0, nil, fmt.Errorf("bucket header of %d bytes, want %d", len(e.value), bucketHeaderSize)
	}
	root = binary.LittleEndian.Uint64(e.value)
	if root == 0 {
		inline = e.value[bucketHeaderSize:]
	}
	return root, inline, nil
}

// inspectOpen walks the open file f (see inspectData), through a read-only mapping of
// it when one can be made. The caller holds the file's lock, so no allot process changes
// or truncates it meanwhile; should something else shrink it under the mapping, the
// fault ends the walk with a problem instead of the process.
func inspectOpen(f *os.File, path string, decode bool) (rep *Report) {
	st, err := f.Stat()
	if err != nil {
		return &Report{Path: path, Problems: []string{fmt.Sprintf("stat: %v", err)}}
	}
	size := st.Size()
	var data []byte
	if size > 0 && size == int64(int(size)) {
		if m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED); err == nil {
			data = m
			defer func() { _ = syscall.Munmap(m) }()
		}
	}
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			rep = &Report{Path: path, Size: size, Problems: []string{fmt.Sprintf("reading the file failed: %v (did it change while being read?)", r)}}
		}
	}()
	return inspectData(f, data, size, path, decode)
}

// inspectData walks the file behind r (or data, its mapping, when not nil). With decode
// it also decodes every record (into rep.Records, or rep.Lost). It never panics on any
// content.
func inspectData(r io.ReaderAt, data []byte, size int64, path string, decode bool) *Report {
	rep := &Report{Path: path, Size: size}
	if size == 0 {
		rep.Problems = append(rep.Problems, "the file is empty (0 bytes): truncated, or never written")
		return rep
	}
	meta, problems, magic := readMetas(r, size)
	if meta.pgid == 0 {
		if !magic {
			rep.Foreign = true
			rep.Problems = append(rep.Problems, "not a bbolt database (no bbolt header at the start of the file)")
			return rep
		}
		rep.Problems = append(rep.Problems, "both bbolt meta pages are damaged: "+strings.Join(problems, "; "))
		return rep
	}
	// A damaged meta page next to a valid one is not data loss by itself (bbolt
	// falls back to the other, one transaction older), but it is damage: report it.
	rep.Problems = append(rep.Problems, problems...)
	rep.PageSize, rep.TxID = int(meta.pageSize), meta.txn
	w := &walker{r: r, data: data, size: size, pageSize: int(meta.pageSize), hwm: meta.pgid, seen: newPageSet(meta.pgid), rep: rep, decode: decode}
	if need := int64(meta.pgid) * int64(meta.pageSize); need > size {
		rep.Problems = append(rep.Problems, fmt.Sprintf("truncated: the database has %d pages of %d bytes (%d bytes) but the file has %d bytes", meta.pgid, meta.pageSize, need, size))
		w.truncated = true
	}
	if meta.freelist != noFreelist {
		w.checkFreelist(meta.freelist)
	}
	w.walkBuckets(meta.root)
	return rep
}

// walkBuckets walks the root tree at page root: the meta bucket's schema, then every
// record.
func (w *walker) walkBuckets(root uint64) {
	rep := w.rep
	buckets := map[string]entry{}
	var names []string
	w.walkTree(root, nil, nil, nil, func(e entry) {
		buckets[string(e.key)] = e
		names = append(names, string(e.key))
	}, func(page uint64, _, _ []byte, why error) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("root page %d: %v", page, why))
	})
	if len(rep.Problems) > 0 && len(names) == 0 {
		return
	}
	if len(names) == 0 {
		rep.Fresh = true
		return
	}
	metaB, hasMeta := buckets[string(metaBucket)]
	if !hasMeta {
		rep.Foreign = true
		rep.Problems = append(rep.Problems, fmt.Sprintf("a bbolt database of another program: buckets %s, no %q bucket", quoteAll(names), metaBucket))
		return
	}
	for _, n := range names {
		if n != string(metaBucket) && n != string(recordsBucket) {
			rep.Problems = append(rep.Problems, fmt.Sprintf("unexpected bucket %q", n))
		}
	}
	w.readSchema(metaB)
	recB, ok := buckets[string(recordsBucket)]
	if !ok {
		rep.Problems = append(rep.Problems, fmt.Sprintf("no %q bucket", recordsBucket))
		return
	}
	w.readRecords(recB)
	sort.Slice(rep.Lost, func(i, j int) bool { return lossKey(rep.Lost[i]) < lossKey(rep.Lost[j]) })
}

// recordMarker starts every stored record value: encodeRecord writes the version first.
var recordMarker = []byte(`{"v":`)

// scanPages looks through the whole file for records the tree walk did not return
// (see Report.Recovered). It trusts nothing of a page, not its header nor its element
// headers, since either may be what the damage hit: it looks for record values by their
// content, every JSON object starting as encodeRecord starts one, and takes one only if
// it decodes strictly (a value naming a valid owner, whose key is then that owner's).
// Garbage does not pass that, and damage next to a record does not hide it.
func scanPages(r io.ReaderAt, size int64, rep *Report) {
	have := make(map[Owner]bool, len(rep.Records))
	for _, rec := range rep.Records {
		have[rec.Owner] = true
	}
	found := map[Owner]Record{}
	// Chunks overlap by more than a record can be long, so every record lies whole
	// in at least one chunk.
	const chunk, overlap = 1 << 20, 64 << 10
	buf := make([]byte, chunk+overlap)
	for off := int64(0); off < size; off += chunk {
		n, err := r.ReadAt(buf, off)
		if n == 0 || (err != nil && err != io.EOF) {
			return
		}
		data := buf[:n]
		for i := 0; ; {
			j := bytes.Index(data[i:], recordMarker)
			if j < 0 || i+j >= chunk {
				break
			}
			i += j
			if rec, ok := recordAt(data[i:]); ok && !have[rec.Owner] {
				// Of several old copies, keep the latest.
				if prev, ok := found[rec.Owner]; !ok || rec.Created.After(prev.Created) {
					found[rec.Owner] = rec
				}
			}
			i++
		}
	}
	for _, rec := range found {
		rep.Recovered = append(rep.Recovered, rec)
	}
	sort.Slice(rep.Recovered, func(i, j int) bool { return rep.Recovered[i].Owner.Compare(rep.Recovered[j].Owner) < 0 })
}

// recordAt decodes the record value at the start of b, if there is one.
func recordAt(b []byte) (Record, bool) {
	var raw json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&raw); err != nil {
		return Record{}, false
	}
	var head struct {
		Owner wireOwner `json:"owner"`
	}
	if json.Unmarshal(raw, &head) != nil {
		return Record{}, false
	}
	o := Owner{ContainerID: head.Owner.ContainerID, IfName: head.Owner.IfName}
	if validateOwner(o, "") != nil {
		return Record{}, false
	}
	rec, err := decodeRecord(ownerKey(o), raw)
	return rec, err == nil
}

func lossKey(l Loss) string {
	if l.Key != "" {
		return l.Key
	}
	return l.From
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// checkFreelist checks the header and bounds of a synced freelist page (files written
// with bbolt's defaults, e.g. by the bbolt CLI), which bbolt reads at Open.
func (w *walker) checkFreelist(id uint64) {
	fail := func(format string, args ...any) {
		w.rep.Problems = append(w.rep.Problems, fmt.Sprintf("freelist page %d: ", id)+fmt.Sprintf(format, args...))
	}
	off := int64(id) * int64(w.pageSize)
	if off+int64(w.pageSize) > w.size {
		fail("past the end of the file")
		return
	}
	head := make([]byte, pageHeaderSize+8)
	if _, err := w.r.ReadAt(head, off); err != nil {
		fail("read: %v", err)
		return
	}
	le := binary.LittleEndian
	if le.Uint64(head) != id || le.Uint16(head[8:]) != freelistPageFlag {
		fail("not a freelist page")
		return
	}
	count, start := uint64(le.Uint16(head[10:])), uint64(pageHeaderSize)
	if count == 0xFFFF {
		count, start = le.Uint64(head[16:]), pageHeaderSize+8
	}
	overflow := uint64(le.Uint32(head[12:]))
	if id+overflow >= w.hwm || start+count*8 > (overflow+1)*uint64(w.pageSize) {
		fail("%d free page numbers do not fit in %d pages", count, overflow+1)
		return
	}
	if end := off + int64(overflow+1)*int64(w.pageSize); end > w.size {
		fail("past the end of the file")
		return
	}
	for i := uint64(0); i <= overflow; i++ {
		w.seen.add(id + i)
	}
}

func (w *walker) readSchema(e entry) {
	root, inline, err := bucketOf(e)
	if err != nil {
		w.rep.Problems = append(w.rep.Problems, fmt.Sprintf("bucket %q: %v", metaBucket, err))
		return
	}
	var schema []byte
	found, metaSound := false, true
	w.walkTree(root, inline, nil, nil, func(e entry) {
		if e.flags&bucketLeafFlag != 0 {
			return
		}
		switch string(e.key) {
		case string(schemaKey):
			schema, found = e.value, true
		case string(walIDKey):
			w.rep.walIDKnown = copy(w.rep.walID[:], e.value) == walIDSize && len(e.value) == walIDSize
		case string(walSeqKey):
			if len(e.value) == 8 {
				w.rep.walSeq = binary.LittleEndian.Uint64(e.value)
			}
		}
	}, func(page uint64, _, _ []byte, why error) {
		metaSound = false
		w.rep.Problems = append(w.rep.Problems, fmt.Sprintf("bucket %q, page %d: %v", metaBucket, page, why))
	})
	w.rep.walSeqReadable = metaSound
	if !found {
		w.rep.Problems = append(w.rep.Problems, fmt.Sprintf("bucket %q has no %q key", metaBucket, schemaKey))
		return
	}
	v, err := strconv.Atoi(string(schema))
	if err != nil {
		w.rep.Problems = append(w.rep.Problems, fmt.Sprintf("meta key %q is %q, not a number", schemaKey, schema))
		return
	}
	w.rep.Schema = v
	if v != schemaVersion {
		w.rep.Problems = append(w.rep.Problems, fmt.Sprintf("schema version %d, this build supports %d", v, schemaVersion))
	}
}

func (w *walker) readRecords(e entry) {
	rep := w.rep
	root, inline, err := bucketOf(e)
	if err != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("bucket %q: %v", recordsBucket, err))
		rep.Lost = append(rep.Lost, Loss{Reason: err.Error()})
		return
	}
	w.walkTree(root, inline, nil, nil, func(e entry) {
		if e.flags&bucketLeafFlag != 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("bucket %q holds a bucket %q", recordsBucket, keyName(e.key)))
			return
		}
		if !w.decode {
			return
		}
		r, err := decodeRecord(e.key, e.value)
		if err != nil {
			rep.Problems = append(rep.Problems, err.Error())
			var ce *CorruptError
			reason := err.Error()
			if errors.As(err, &ce) {
				reason = ce.Err.Error()
			}
			rep.Lost = append(rep.Lost, Loss{Key: keyName(e.key), Reason: reason})
			return
		}
		rep.Records = append(rep.Records, r)
	}, func(page uint64, lo, hi []byte, why error) {
		l := Loss{Page: page, From: keyName(lo), To: keyName(hi), Reason: why.Error()}
		if page == 0 {
			l.Page = root
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("bucket %q: %s", recordsBucket, l))
		rep.Lost = append(rep.Lost, l)
	})
}
