package benchutil

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Row is one figure of a Columns table: its name and how to read it off each column.
type Row[T any] struct {
	Name  string
	Value func(T) string
}

// Columns prints a table of a few runs side by side: one column per run (headed by its
// title, upper-cased), one line per row, corner heading the names. The reports of make soak
// and make overload use it.
func Columns[T any](w io.Writer, corner string, runs []T, title func(T) string, rows []Row[T]) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := corner
	for _, r := range runs {
		head += "\t" + strings.ToUpper(title(r))
	}
	fmt.Fprintln(tw, head)
	for _, row := range rows {
		line := row.Name
		for _, r := range runs {
			line += "\t" + row.Value(r)
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
}
