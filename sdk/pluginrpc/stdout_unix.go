//go:build unix

package pluginrpc

import (
	"bufio"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// go-plugin reads the handshake as the first line of the plugin's stdout, so a plugin that
// prints anything before serving (a stray fmt.Println in init, a library banner, C code
// writing to fd 1) would make the host fail with "Unrecognized remote plugin message".
// When this process runs as an allot plugin (magic cookie set), fd 1 is therefore pointed
// at a pipe whose lines are logged on stderr, and the real stdout is kept aside for the
// handshake alone. After Serve, go-plugin forwards os.Stdout writes to the host itself.

var (
	realStdout   *os.File // the host's pipe, for the handshake; nil when not guarded
	pluginStderr = os.Stderr
)

func init() {
	if os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		return
	}
	fd, err := unix.FcntlInt(1, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		unix.Close(fd)
		return
	}
	if err := unix.Dup2(int(w.Fd()), 1); err != nil {
		unix.Close(fd)
		r.Close()
		w.Close()
		return
	}
	w.Close()
	realStdout = os.NewFile(uintptr(fd), "/dev/stdout")
	os.Stdout = os.NewFile(1, "/dev/stdout")
	log := hclog.New(&hclog.LoggerOptions{Name: "stdout", Output: pluginStderr, JSONFormat: true})
	go func() {
		// Never stop reading: a full pipe would block the plugin's writers forever.
		br := bufio.NewReaderSize(r, 4096)
		for {
			line, err := br.ReadSlice('\n')
			if len(line) > 0 {
				log.Warn("plugin wrote to stdout", "line", strings.TrimRight(string(line), "\r\n"))
			}
			if err != nil && err != bufio.ErrBufferFull {
				return
			}
		}
	}()
}

func useRealStdout() {
	if realStdout != nil {
		os.Stdout = realStdout
	}
}
