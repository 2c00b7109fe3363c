package config

import "fmt"

// problems collects validation errors, each naming its field under prefix (e.g.
// "cluster.eni."), so one check reports everything wrong at once.
type problems struct {
	prefix string
	errs   []error
}

func (p *problems) add(field, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s%s: %s", p.prefix, field, fmt.Sprintf(format, args...)))
}
