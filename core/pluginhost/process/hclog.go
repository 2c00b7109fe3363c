package process

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// hclogSlog adapts go-plugin's hclog.Logger to log/slog, so the plugin's own log lines (which
// go-plugin parses from the plugin's stderr) and go-plugin's lifecycle messages land in
// allotd's logger with their level and fields.
type hclogSlog struct {
	l     *slog.Logger
	name  string
	args  []any
	level *slog.LevelVar
}

var _ hclog.Logger = (*hclogSlog)(nil)

func newHclog(l *slog.Logger, name string) *hclogSlog {
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelDebug - 4)
	return &hclogSlog{l: l, name: name, level: lv}
}

func toSlogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Info, hclog.NoLevel, hclog.DefaultLevel:
		return slog.LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelError + 4 // Off: above everything
}

func (h *hclogSlog) Log(level hclog.Level, msg string, args ...any) {
	lv := toSlogLevel(level)
	if lv < h.level.Level() || !h.l.Enabled(context.Background(), lv) {
		return
	}
	attrs := make([]any, 0, len(h.args)+len(args)+2)
	if h.name != "" {
		attrs = append(attrs, "logger", h.name)
	}
	attrs = append(attrs, h.args...)
	attrs = append(attrs, args...)
	h.l.Log(context.Background(), lv, msg, attrs...)
}

func (h *hclogSlog) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogSlog) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogSlog) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogSlog) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogSlog) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogSlog) enabled(l hclog.Level) bool {
	lv := toSlogLevel(l)
	return lv >= h.level.Level() && h.l.Enabled(context.Background(), lv)
}

func (h *hclogSlog) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hclogSlog) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hclogSlog) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hclogSlog) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hclogSlog) IsError() bool { return h.enabled(hclog.Error) }

func (h *hclogSlog) ImpliedArgs() []any { return h.args }

func (h *hclogSlog) With(args ...any) hclog.Logger {
	c := *h
	c.args = append(append([]any(nil), h.args...), args...)
	return &c
}

func (h *hclogSlog) Name() string { return h.name }

func (h *hclogSlog) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (h *hclogSlog) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

func (h *hclogSlog) SetLevel(level hclog.Level) { h.level.Set(toSlogLevel(level)) }

func (h *hclogSlog) GetLevel() hclog.Level {
	switch lv := h.level.Level(); {
	case lv < slog.LevelDebug:
		return hclog.Trace
	case lv < slog.LevelInfo:
		return hclog.Debug
	case lv < slog.LevelWarn:
		return hclog.Info
	case lv < slog.LevelError:
		return hclog.Warn
	}
	return hclog.Error
}

func (h *hclogSlog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hclogSlog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &lineWriter{log: func(line string) { h.Info(line) }}
}

// lineWriter calls log once per complete line written to it; it is how the plugin's
// forwarded stdout and stderr reach slog without ever blocking the plugin.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	log func(line string)
}

const maxLine = 64 << 10

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) > maxLine { // a runaway line: log it in pieces
				w.log(string(w.buf))
				w.buf = w.buf[:0]
			}
			return len(p), nil
		}
		w.log(string(bytes.TrimRight(w.buf[:i], "\r")))
		w.buf = w.buf[i+1:]
	}
}
